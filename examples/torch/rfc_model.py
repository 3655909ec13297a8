"""The ExecuTorch RFC's model as a PyTorch module: 8 x [GEMM -> RMSNorm -> softshrink, then + 1],
1 x 4096 bf16. Exported with the `+ 1` on the CPU it is examples/plans/rfc.json:

    python -m baton_export examples/torch/rfc_model.py:make -o out --cpu-op aten.add

(scripts/export_rfc.py writes the bundled file). The weights are baton's seeded inits
(baton_export.seeded_normal_), so the plan carries their seeds instead of their bytes."""
import torch
import torch.nn.functional as F
from torch import nn

from baton_export import seeded_normal_


class RFC(nn.Module):
    def __init__(self, layers=8, d=4096, dtype=torch.bfloat16):
        super().__init__()
        self.layers, self.d = layers, d
        # seeded_normal_ marks the Parameter itself, so it is called on it, not on a tensor
        # that a Parameter then wraps
        self.A = nn.Parameter(torch.empty(d, d, dtype=dtype))
        seeded_normal_(self.A, 7, std=0.02)
        for i in range(layers):
            self.register_parameter(f"w{i}", nn.Parameter(torch.empty(d, dtype=dtype)))
            seeded_normal_(getattr(self, f"w{i}"), 100 + i, std=0.05, mean=1.0)

    def forward(self, x0):
        x = x0
        for i in range(self.layers):
            h = x @ self.A  # the GEMM delegate
            n = F.rms_norm(h, (self.d,), getattr(self, f"w{i}"), eps=1e-5)
            x = F.softshrink(n, 0.5) + 1.0  # + 1 is the CPU step (cpu_ops=[aten.add])
        return x


def make(layers=8, d=4096):
    torch.manual_seed(0)
    return RFC(layers, d), (torch.randn(1, d, dtype=torch.bfloat16),)
