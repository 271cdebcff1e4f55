"""A new analysis, written as a new author would (one file): the residual-stream norm per layer."""
import plotly.graph_objects as go
import torch

from .base import Analysis, Result, eval_batch, n_option, seed_option

DEFINITION = "Mean L2 norm of blocks.l.hook_resid_post over the query positions of n held-out sequences, per layer l."


@torch.no_grad()
def compute(model, n: int = 64, seed: int = 1234) -> Result:
    batch = eval_batch(model, n, seed)
    names = [f"blocks.{l}.hook_resid_post" for l in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(batch.tokens, names_filter=names)
    norms = [cache[name][batch.query_mask].norm(dim=-1).mean().item() for name in names]
    fig = go.Figure(go.Bar(y=norms)).update_layout(title="residual norm per layer")
    return Result("residual-norm", DEFINITION, dict(norms=norms), {"norms": fig})


ANALYSIS = Analysis("residual-norm", "mean residual-stream norm per layer", DEFINITION, compute,
                    options=(n_option(64), seed_option()))
