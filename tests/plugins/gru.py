"""A GRU as a new architecture, written as a new author would (one file, nothing else touched)."""
from dataclasses import dataclass

from torch import nn
from transformer_lens.hook_points import HookPoint

from tasks import ConfigError

from .base import HookedSequenceModel, ModelConfig


@dataclass
class GRUConfig(ModelConfig):
    d_model: int | None = None  # None: matched to the capacity reference by the registry
    n_layers: int = 2

    ARCH = "gru"

    def check(self) -> None:
        if self.d_model is None:
            raise ConfigError("gru: d_model is not set (presets fill it in by capacity matching)")


class GRUMixer(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.gru = nn.GRU(d_model, d_model, batch_first=True)
        self.hook_hidden = HookPoint()

    def forward(self, x):
        return self.hook_hidden(self.gru(x)[0])


class WindTunnelGRU(HookedSequenceModel):
    arch, order, label = "gru", 50, "A GRU"
    config_class = GRUConfig
    presets = {"cpu": GRUConfig(n_layers=2), "paper": GRUConfig(n_layers=6)}

    def make_mixer(self, layer: int) -> nn.Module:
        return GRUMixer(self.config.d_model)
