"""Calibration against the exact Bayes posterior.

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch

from tasks import entropy_bits
from tasks.regression import gaussian_entropy_bits

from . import activations
from .base import Analysis, Result, answer_probs, eval_batch, n_option, seed_option
from .intervals import bootstrap_difference, bootstrap_interval

DEFINITION = """\
The model's answer against the exact Bayes posterior (all in bits, over the task's C answer classes only,
at query positions):
- entropy MAE: mean over sequences and query positions of |H(model) - H(Bayes)|, where H(model) is
  the entropy of the softmax over the answer-class logits. The absolute value is taken before
  averaging, so over- and under-confidence cannot cancel.
- KL: mean of KL(Bayes || model) = sum_c p_c log2(p_c / q_c) over classes with p_c > 0.
- accuracy (sampled): the fraction of queries where the model's arg-max equals the answer actually
  sampled in the sequence, a hit rate with sampling noise. bayes_accuracy (expected, not sampled):
  the hit rate a predictor that knows the Bayes posterior has in expectation, the mean of the
  posterior's largest probability; the ceiling accuracy approaches. Over n sequences accuracy can
  exceed bayes_accuracy by chance.
- infeasible_mass: the model's probability on answers the Bayes posterior rules out (p_c = 0).
- Continuous tasks (a Gaussian predictive): differential entropies in bits, KL between the two
  Gaussians in bits, and mean_sq_error of the model's mean against the Bayes mean instead of accuracy.
  relative_mean_error: mean of (mu_model - mu_Bayes)^2 / var_Bayes, the mean's error in units of the
  Bayes predictive variance (0: the Bayes mean; 1: off by one predictive standard deviation on
  average). A model can keep its entropy close by inflating its variance; this number cannot.
- Regression, the Garg et al. (2022) view: for k = 0..n-1 examples in context, the squared error
  against the y actually drawn, of the model's mean, of the Bayes mean and of least squares on the k
  examples (minimum-norm below k = d), each divided by d."""


def discrete_terms(model, batch) -> dict[str, torch.Tensor]:
    """Per-position model entropy, KL(Bayes||model), correctness and ruled-out mass, [B, T] each."""
    q = answer_probs(model, batch.tokens)
    p = batch.posterior.float()
    log_ratio = torch.log2(p.clamp_min(1e-30)) - torch.log2(q.clamp_min(1e-30))
    labels = batch.targets if batch.targets.dim() == 2 else p.argmax(-1)
    return dict(model_entropy=entropy_bits(q), kl=(p * log_ratio).where(p > 0, torch.zeros_like(p)).sum(-1),
                accuracy=(q.argmax(-1) == labels).float(), bayes_accuracy=p.max(-1).values,
                infeasible_mass=(q * (p == 0)).sum(-1))


@torch.no_grad()
def gaussian_terms(model, batch) -> dict[str, torch.Tensor]:
    """The same for a Gaussian predictive: differential entropies, KL between Gaussians, and the
    squared error of the model's mean against the Bayes mean (there is no accuracy)."""
    mean, var = (torch.cat(parts) for parts in zip(*(model.predictive(batch.tokens[i:i + 1024])
                                                     for i in range(0, len(batch), 1024))))
    m_b, v_b = batch.posterior_mean.float(), batch.posterior_var.float()
    kl_nats = 0.5 * (torch.log(var / v_b) + (v_b + (m_b - mean) ** 2) / var - 1)
    return dict(model_entropy=gaussian_entropy_bits(var), kl=kl_nats / math.log(2),
                mean_sq_error=(mean - m_b) ** 2, relative_mean_error=(mean - m_b) ** 2 / v_b, model_mean=mean)


def least_squares_predictions(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """For each i, x_i . w_hat with w_hat the least-squares fit to pairs 1..i-1 (minimum norm while
    they are fewer than d; 0 with none): [B, n]. In float64, through the pseudo-inverse."""
    x, y = x.double(), y.double()
    predictions = torch.zeros(y.shape, dtype=torch.float64)
    for i in range(1, x.shape[1]):
        w_hat = torch.linalg.pinv(x[:, :i]) @ y[:, :i, None]  # [B, d, 1]
        predictions[:, i] = (x[:, i] * w_hat[..., 0]).sum(-1)
    return predictions


def in_context_curves(batch, model_mean: torch.Tensor) -> dict:
    """Squared error against the drawn y by number of in-context examples, per d (Garg et al. 2022)."""
    x, y = batch.hypothesis["x"], batch.hypothesis["y"]
    d = x.shape[-1]
    queries = slice(0, None, 2)  # query i (0-based) has seen i examples
    predictions = dict(model=model_mean[:, queries], bayes=batch.posterior_mean[:, queries],
                       least_squares=least_squares_predictions(x, y))
    curves = {f"{name}_sq_error": ((pred.double() - y.double()) ** 2 / d).mean(0).tolist()
              for name, pred in predictions.items()}
    return dict(examples=list(range(x.shape[1])), d=d, **curves)


DESCRIPTIONS = {
    "entropy_mae_bits": "mean |H(model) - H(Bayes)| over query positions, bits",
    "intervals": "95% percentile bootstrap interval of each headline number, resampling whole sequences (2,000 "
                 "resamples; the queries of one sequence share its hidden truth, so they are not independent)",
    "kl_bits": "mean KL(Bayes || model) over query positions, bits",
    "accuracy": "sampled: fraction of queries where the model's arg-max is the answer drawn in the sequence",
    "bayes_accuracy": "expected, not sampled: mean largest Bayes-posterior probability, the Bayes predictor's "
                      "hit rate (the ceiling for accuracy)",
    "infeasible_mass": "model probability on answers the Bayes posterior rules out",
    "mean_sq_error": "squared error of the model's predictive mean against the Bayes mean",
    "relative_mean_error": "(model mean - Bayes mean)^2 / Bayes predictive variance, averaged: 0 is the Bayes mean",
}


HEADLINE = (("entropy_mae_bits", "abs_error"), ("kl_bits", "kl"), ("accuracy", "accuracy"),
            ("relative_mean_error", "relative_mean_error"))  # (number, the per-query term it averages)


def measure(model, batch, in_context: bool = False, intervals: bool = False, sums: dict | None = None,
            per_query: dict | None = None) -> dict:
    """Calibration numbers of ``model`` on ``batch``, plus per-query-position curves (and, with
    ``in_context`` on regression, the squared-error curves by number of examples; with ``intervals``, a
    95% bootstrap interval over sequences for each headline number). ``sums``, when given, is filled with
    each headline number's (per-sequence sum, per-sequence query count), for paired comparisons; ``per_query``
    with |H(model) - H(Bayes)| and the query mask at each query column of per_position, [B, Q] each (for
    intervals of per-position numbers)."""
    terms = gaussian_terms(model, batch) if model.task.continuous else discrete_terms(model, batch)
    mask = batch.query_mask
    h_bayes = batch.bayes_entropy.float()
    terms["abs_error"] = (terms["model_entropy"] - h_bayes).abs()
    terms["signed_error"] = terms["model_entropy"] - h_bayes
    columns = mask.any(0).nonzero().flatten()

    def per_position(x):
        m = mask[:, columns].float()
        return ((x[:, columns] * m).sum(0) / m.sum(0)).tolist()

    numbers = dict(entropy_mae_bits=terms["abs_error"][mask].mean().item(), kl_bits=terms["kl"][mask].mean().item())
    for name in ("accuracy", "bayes_accuracy", "infeasible_mass", "mean_sq_error", "relative_mean_error"):
        if name in terms:
            numbers[name] = terms[name][mask].mean().item()
    numbers.update(n_sequences=len(batch), n_queries=int(mask.sum()))
    # per sequence: the sum of each term over its queries, and how many it has
    per_sequence = {name: ((terms[key] * mask).sum(1), mask.sum(1)) for name, key in HEADLINE if key in terms}
    if sums is not None:
        sums.update(per_sequence)
    if per_query is not None:
        per_query.update(abs_error=(terms["abs_error"] * mask)[:, columns], asked=mask[:, columns].double())
    if intervals:
        numbers["intervals"] = {name: bootstrap_interval(*pair) for name, pair in per_sequence.items()}
    numbers["per_position"] = dict(
        position=columns.tolist(), model_entropy_bits=per_position(terms["model_entropy"]),
        bayes_entropy_bits=per_position(h_bayes), abs_error_bits=per_position(terms["abs_error"]),
        signed_error_bits=per_position(terms["signed_error"]), kl_bits=per_position(terms["kl"]),
        **({"infeasible_mass": per_position(terms["infeasible_mass"])} if "infeasible_mass" in terms else {}),
        **({"relative_mean_error": per_position(terms["relative_mean_error"])}
           if "relative_mean_error" in terms else {}),
    )
    if in_context and model.task.linear_in_context:
        numbers["in_context"] = in_context_curves(batch, terms["model_mean"])
    return numbers


def ratio_interval(changed: dict, intact: dict) -> list[float] | None:
    """The 95% paired bootstrap interval of MAE(changed) / MAE(intact), two ``measure`` runs' ``sums`` on the
    same sequences (an ablation against the intact model); None when the intact model is exact (MAE 0)."""
    if float(intact["entropy_mae_bits"][0].sum()) <= 0:
        return None
    return bootstrap_difference(changed["entropy_mae_bits"], intact["entropy_mae_bits"], ratio=True)


def staircase_figure(curves: dict, title: str, intact: dict | None = None) -> go.Figure:
    """Model against Bayes entropy per query; ``intact``: the curves of the model before an ablation, drawn too."""
    x = list(range(1, len(curves["position"]) + 1))
    fig = go.Figure()
    fig.add_scatter(x=x, y=curves["bayes_entropy_bits"], name="Bayes", mode="lines",
                    line=dict(shape="hvh", color="black", width=2))
    if intact is not None:
        fig.add_scatter(x=x, y=intact["model_entropy_bits"], name="intact model", mode="markers",
                        marker=dict(size=9, color="#7f7f7f", symbol="circle-open"),
                        hovertemplate="query %{x}<br>H intact model %{y:.4f} bits<extra></extra>")
    fig.add_scatter(x=x, y=curves["model_entropy_bits"], name="model", mode="markers",
                    marker=dict(size=8, color="#d62728"),
                    customdata=list(zip(curves["abs_error_bits"], curves["position"])),
                    hovertemplate="query %{x} (token %{customdata[1]})<br>H model %{y:.4f} bits"
                                  "<br>|error| %{customdata[0]:.2e} bits<extra></extra>")
    fig.update_layout(title=title, xaxis_title="query index", yaxis_title="entropy (bits)",
                      width=720, height=440)
    return fig


def error_figure(curves: dict) -> go.Figure:
    x = list(range(1, len(curves["position"]) + 1))
    fig = go.Figure()
    fig.add_bar(x=x, y=curves["abs_error_bits"], name="|H model - H Bayes|")
    fig.add_scatter(x=x, y=curves["kl_bits"], name="KL(Bayes||model)", mode="lines+markers")
    fig.update_layout(title="Calibration error by query position", xaxis_title="query index",
                      yaxis_title="bits (log scale)", yaxis_type="log", 
                      width=720, height=440)
    return fig


def in_context_figure(curves: dict) -> go.Figure:
    d, fig = curves["d"], go.Figure()
    styles = dict(model=("model mean", "#d62728", "solid"), bayes=("Bayes mean", "black", "solid"),
                  least_squares=("least squares", "#1f77b4", "dash"))
    for name, (label, colour, dash) in styles.items():
        fig.add_scatter(x=curves["examples"], y=curves[f"{name}_sq_error"], name=label, mode="lines+markers",
                        line=dict(color=colour, dash=dash), marker=dict(size=5))
    fig.add_vline(x=d, line=dict(color="grey", dash="dot"), annotation_text=f"k = d = {d}",
                  annotation_position="top right")
    # log scale: least squares' error peaks by orders of magnitude at k = d (it interpolates the noise)
    fig.update_layout(title="Squared error against the drawn y by number of in-context examples",
                      xaxis_title="in-context examples k", yaxis_title="squared error / d (log scale)",
                      yaxis_type="log",
                      width=720, height=440)
    return fig


def compute(model, n: int = 2000, seed: int = 1234) -> Result:
    """Calibration of ``model`` against the exact posterior on ``n`` held-out sequences."""
    numbers = measure(model, eval_batch(model, n, seed), in_context=True, intervals=True)
    numbers["seed"] = seed
    low, high = numbers["intervals"]["entropy_mae_bits"]
    title = (f"{model.task.name}: model vs Bayes entropy (MAE {numbers['entropy_mae_bits']:.4f} bits, 95% "
             f"{low:.4f}-{high:.4f}; KL {numbers['kl_bits']:.4f} bits; {numbers['n_sequences']:,} sequences)")
    if "accuracy" in numbers:
        title += (f"<br><sup>accuracy {numbers['accuracy']:.4f} (sampled answers) vs bayes_accuracy "
                  f"{numbers['bayes_accuracy']:.4f} (expected hit rate of the exact posterior)</sup>")
    if "relative_mean_error" in numbers:
        title += f"<br><sup>relative mean error {numbers['relative_mean_error']:.3f} (in Bayes predictive variances)</sup>"
    figures = {"staircase": staircase_figure(numbers["per_position"], title),
               "error-by-position": error_figure(numbers["per_position"])}
    if "in_context" in numbers:
        figures["in-context"] = in_context_figure(numbers["in_context"])
    return Result("calibration", DEFINITION, numbers, figures, descriptions={k: v for k, v in DESCRIPTIONS.items() if k in numbers})


LANGUAGE_DEFINITION = " ".join("""
 On a language model and a prompt task (two-label, coin), the model's answer at each prompt's end is its
next-token distribution renormalised over the task's answer tokens; it is scored against the exact Bayes
predictive of the next answer, in bits: entropy MAE (mean |H(model) - H(Bayes)|) and KL(Bayes || model),
over all prompts and per number k of shown examples. Per k also: the mean probability the model and Bayes
give the answer Bayes favours (model_on_bayes_top, bayes_top), the agreement (the fraction of prompts where the model's more likely answer is the
Bayes one, over prompts where Bayes is not a tie), answer_mass (the mean probability the model puts on the
answer tokens before renormalising: near 0 means the model expected another continuation) and
uniform_kl_bits (the KL of a predictor that always says 50/50, a baseline that ignores the context).
""".split())


@torch.no_grad()
def answer_distribution(lm, prompt_set) -> tuple[torch.Tensor, torch.Tensor]:
    """The renormalised answer distribution [n, answers] (float64) and the unrenormalised mass on the answers."""
    n = len(prompt_set.prompts)
    probs, mass = torch.zeros(n, len(prompt_set.answers), dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for rows, tokens in activations.equal_length_batches(lm, prompt_set):
        log_p = torch.log_softmax(activations.last_logits(lm, tokens)[0].double(), -1)[:, list(prompt_set.answers)].cpu()
        probs[rows], mass[rows] = torch.softmax(log_p, -1), log_p.exp().sum(-1)
    return probs, mass


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int) -> Result:
    """Answer-token calibration of a language model against the exact Bayes predictive, per number shown."""
    prompt_set = activations.prompt_set(lm, prompts, words, per_shot, alpha, seed)
    probs, mass = answer_distribution(lm, prompt_set)
    numbers = activations.calibration(probs, prompt_set)
    bayes, shots = prompt_set.bayes, prompt_set.shots
    decided = (bayes[:, 0] - 0.5).abs() > 1e-9
    agree = (probs.argmax(-1) == bayes.argmax(-1)).double()
    on_top = probs.gather(1, bayes.argmax(-1, keepdim=True))[:, 0]
    uniform_kl = (bayes * torch.log2(2 * bayes.clamp_min(1e-300))).sum(-1)
    for k, row in numbers["by_shots"].items():
        at = shots == k
        row.update(model_on_bayes_top=on_top[at].mean().item(), bayes_top=bayes[at].max(-1).values.mean().item(),
                   agreement=agree[at & decided].mean().item() if (at & decided).any() else None,
                   answer_mass=mass[at].mean().item(), uniform_kl_bits=uniform_kl[at].mean().item(),
                   model_entropy_bits=entropy_bits(probs[at]).mean().item(),
                   bayes_entropy_bits=entropy_bits(bayes[at]).mean().item(), n_prompts=int(at.sum()))
    numbers.update(answer_mass=mass.mean().item(), uniform_kl_bits=uniform_kl.mean().item(),
                   agreement=agree[decided].mean().item() if decided.any() else None,
                   n_prompts=len(prompt_set.prompts), prompts=prompt_set.description)
    # 95% intervals over prompts (the same resampling as every other language-model analysis), so two models'
    # calibrations can be told apart or not
    mae_interval, kl_interval = activations.mean_intervals(
        torch.stack(activations.calibration_terms(probs, prompt_set), 1), prompt_set)
    numbers["intervals"] = dict(entropy_mae_bits=mae_interval, kl_bits=kl_interval)
    subject = prompt_set.description
    return Result("calibration", LANGUAGE_DEFINITION, numbers, {
        "by-shots": shots_figure(numbers["by_shots"], subject),
        "answers": answers_figure(probs[:, 0], bayes[:, 0], shots, subject)})


def shots_figure(by_shots: dict, subject: str) -> go.Figure:
    ks = sorted(by_shots)
    fig = go.Figure()
    for key, name, colour, dash in (("bayes_entropy_bits", "H Bayes predictive", "black", "solid"),
                                    ("model_entropy_bits", "H model (answer tokens)", "#d62728", "solid"),
                                    ("kl_bits", "KL(Bayes || model)", "#1f77b4", "dash"),
                                    ("uniform_kl_bits", "KL(Bayes || 50/50)", "#7f7f7f", "dot")):
        fig.add_scatter(x=list(range(len(ks))), y=[by_shots[k][key] for k in ks], name=name, mode="lines+markers",
                        line=dict(color=colour, dash=dash), customdata=ks,
                        hovertemplate=f"k = %{{customdata}}<br>{name}: %{{y:.4f}} bits<extra></extra>")
    fig.update_layout(title=f"{subject}: the model's answer against the Bayes predictive, by examples shown",
                      xaxis=dict(title="examples shown k", tickmode="array", tickvals=list(range(len(ks))),
                                 ticktext=[str(k) for k in ks]),
                      yaxis_title="bits (means over prompts)", width=760, height=440)
    return fig


def answers_figure(model_first: torch.Tensor, bayes_first: torch.Tensor, shots: torch.Tensor, subject: str) -> go.Figure:
    fig = go.Figure()
    for k in shots.unique().tolist():
        at = shots == k
        fig.add_scatter(x=bayes_first[at].tolist(), y=model_first[at].tolist(), mode="markers", name=f"k = {k}",
                        marker=dict(size=6, opacity=0.7),
                        hovertemplate=f"k = {k}<br>Bayes %{{x:.3f}}<br>model %{{y:.3f}}<extra></extra>")
    fig.add_scatter(x=[0, 0.5, 1], y=[0, 0.5, 1], mode="lines", name="model = Bayes", line=dict(color="gray", dash="dash"))
    fig.update_layout(title=f"{subject}: probability of the first answer token, model against Bayes, per prompt",
                      xaxis=dict(title="Bayes predictive", range=[-0.02, 1.02]),
                      yaxis=dict(title="model (renormalised over the answers)", range=[-0.02, 1.02]),
                      width=640, height=560)
    return fig


ANALYSIS = Analysis("calibration", "entropy MAE, KL and accuracy against the exact Bayes posterior", DEFINITION,
                    compute, options=(n_option(2000), seed_option()), order=0,
                    on_language_model=on_language_model, language_options=activations.language_options(),
                    language_definition=LANGUAGE_DEFINITION)
