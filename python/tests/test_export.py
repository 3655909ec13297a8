"""baton_export.export on small modules: each plan is run by the baton CLI on the CPU and compared
with the module's eager output (check=True), and its structure is checked (one step per pattern,
placements, names)."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import baton_export
from baton_export import ExportError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEED = int(os.environ.get("BATON_TEST_SEED", "0") or 0)


def steps(r, target=None):
    return [s for s in r.plan["steps"] if target is None or
            s.get("kernel", s.get("delegate")) == target]


class HFRMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm, verbatim in its arithmetic."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class MLP(nn.Module):
    def __init__(self, d=32, f=64):
        super().__init__()
        self.up = nn.Linear(d, f)
        self.down = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down(F.softshrink(self.up(x), 0.1))


class Residual(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.norm = HFRMSNorm(d)
        self.mlp = MLP(d)

    def forward(self, x, bias):
        h = x + self.mlp(self.norm(x))
        return h * bias, h + 2.0


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(SEED)


def test_mlp_matches_eager_through_the_baton_cli(tmp_path, baton, caps):
    r = baton_export.export(MLP(), (torch.randn(4, 32),), tmp_path, device="cpu", check=True,
                            baton=baton, weights_format=caps.weights_format)
    assert [s["delegate" if "delegate" in s else "kernel"] for s in r.plan["steps"]] == \
        ["gemm", "add", "softshrink", "gemm"]
    assert steps(r, "gemm")[0]["attrs"] == {"trans_b": True}
    ins = [t["name"] for t in r.plan["tensors"] if t.get("role") == "input"]
    assert ins == ["x"]
    consts = {t["name"] for t in r.plan["tensors"] if t.get("role") == "constant"}
    assert consts == {"up.weight", "up.bias", "down.weight"}
    assert r.errors["output"] < 1e-5


def test_weights_are_safetensors_under_pytorch_names(tmp_path):
    from safetensors.torch import load_file

    m = MLP()
    r = baton_export.export(m, (torch.randn(2, 32),), tmp_path, device="cpu", verbose=False)
    w = load_file(r.weights_path)
    assert set(w) == {"up.weight", "up.bias", "down.weight"}
    assert torch.equal(w["up.weight"], m.up.weight.detach())
    t = {t["name"]: t for t in r.plan["tensors"]}
    assert t["down.weight"]["init"] == {"kind": "safetensors", "path": "weights.safetensors",
                                        "key": "down.weight"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_rmsnorm_pattern_is_one_rms_norm_step(tmp_path, baton, caps, dtype):
    m = HFRMSNorm(64).to(dtype)
    r = baton_export.export(m, (torch.randn(3, 5, 64, dtype=dtype),), tmp_path, device="cpu",
                            check=True, baton=baton, weights_format=caps.weights_format)
    assert [s["kernel"] for s in r.plan["steps"]] == ["rms_norm_fwd"]
    assert r.plan["steps"][0]["attrs"] == {"eps": 1e-6}
    assert r.errors["output"] < (1e-5 if dtype == torch.float32 else 2e-2)


def test_aten_rms_norm_and_residuals(tmp_path, baton, caps):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.rand(16) + 0.5)
            self.lin = nn.Linear(16, 16)

        def forward(self, x):
            h = F.rms_norm(x, (16,), self.w, 1e-5)
            return x + self.lin(h) * self.w

    r = baton_export.export(M(), (torch.randn(2, 3, 16),), tmp_path, device="cpu", check=True,
                            baton=baton, weights_format=caps.weights_format)
    assert len(steps(r, "rms_norm_fwd")) == 1 and len(steps(r, "gemm")) == 1
    assert r.errors["output"] < 1e-5


def test_several_outputs_broadcasts_and_scalars(tmp_path, baton, caps):
    m = Residual()
    r = baton_export.export(m, (torch.randn(4, 32), torch.randn(32)), tmp_path, device="cpu",
                            check=True, baton=baton, weights_format=caps.weights_format)
    outs = [t["name"] for t in r.plan["tensors"] if t.get("role") == "output"]
    assert sorted(outs) == ["output.0", "output.1"]
    ins = [t["name"] for t in r.plan["tensors"] if t.get("role") == "input"]
    assert ins == ["x", "bias"]
    assert steps(r, "add_scalar")[0]["attrs"] == {"value": 2.0}
    assert max(r.errors.values()) < 1e-5


def test_rfc_pattern_places_cpu_ops_on_the_cpu(tmp_path, baton, caps):
    sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
    from rfc_model import make

    m, args = make(layers=3, d=64)
    r = baton_export.export(m, args, tmp_path, device="cuda:0", cpu_ops=[torch.ops.aten.add],
                            check=True, baton=baton, weights_format=caps.weights_format)
    kinds = [(s.get("kernel", s.get("delegate")), s["device"]) for s in r.plan["steps"]]
    assert kinds == [("gemm", "cuda:0"), ("rms_norm_fwd", "cuda:0"), ("softshrink", "cuda:0"),
                     ("add_scalar", "cpu")] * 3
    assert len(r.notes) == 3 and all("cpu_ops" in n for n in r.notes)
    assert r.weights_path is None  # seeded weights: the plan holds their seeds, not bytes
    assert r.errors["output"] <= 2 ** -4  # bf16 through 3 layers
    # baton inspect shows the GPU/CPU boundaries the placement made: 3 CPU segments
    out = subprocess.run([baton, "inspect", "--json", r.plan_path], capture_output=True,
                         text=True, check=True).stdout
    segs = json.loads(out)["segments"]
    assert [s["device"] for s in segs] == ["cuda:0", "cpu"] * 3


def test_cpu_ops_accept_packets_overloads_and_names(tmp_path):
    for ops in ([torch.ops.aten.softshrink], [torch.ops.aten.softshrink.default],
                ["aten.softshrink"], ["torch.ops.aten.softshrink"]):
        r = baton_export.export(MLP(), (torch.randn(2, 32),), tmp_path, cpu_ops=ops,
                                verbose=False)
        assert [s["device"] for s in r.plan["steps"]] == ["cuda:0", "cuda:0", "cpu", "cuda:0"]


def test_views_are_zero_copy_tensors(tmp_path, baton, caps):
    class M(nn.Module):
        def forward(self, x):
            return (x.reshape(4, 6) + 1.0).view(2, 12).unsqueeze(0) * 2.0

    r = baton_export.export(M(), (torch.randn(2, 12),), tmp_path, device="cpu",
                            verbose=False, weights_format=caps.weights_format)
    views = [t for t in r.plan["tensors"] if "view_of" in t]
    assert views and not steps(r, "copy")
    caps.need("view_of")
    r = baton_export.export(M(), (torch.randn(2, 12),), tmp_path, device="cpu", check=True,
                            baton=baton, verbose=False, weights_format=caps.weights_format)
    assert r.errors["output"] < 1e-6


def test_silu_mul_and_casts(tmp_path, baton, caps):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = nn.Linear(16, 32, bias=False)
            self.u = nn.Linear(16, 32, bias=False)

        def forward(self, x):
            return (F.silu(self.g(x)) * self.u(x)).to(torch.float64), F.gelu(x).softmax(-1)

    r = baton_export.export(M(), (torch.randn(3, 16),), tmp_path, device="cpu", verbose=False,
                            weights_format=caps.weights_format)
    assert len(steps(r, "silu_mul")) == 1 and not steps(r, "silu")
    assert len(steps(r, "cast")) == 1
    caps.need("silu_mul", "cast", "gelu", "softmax")
    r = baton_export.export(M(), (torch.randn(3, 16),), tmp_path, device="cpu", check=True,
                            baton=baton, verbose=False, weights_format=caps.weights_format)
    assert max(r.errors.values()) < 1e-5


def test_unsupported_op_names_the_op_the_source_line_and_the_supported_set(tmp_path):
    class M(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 0) + 1  # the line the error must name

    with pytest.raises(ExportError) as e:
        baton_export.export(M(), (torch.randn(4),), tmp_path)
    msg = str(e.value)
    assert "aten.cumsum" in msg
    assert "test_export.py" in msg and "torch.cumsum(x, 0)" in msg
    assert "supported ops:" in msg and "aten.linear" in msg and "aten.rms_norm" in msg


def test_unsupported_broadcast_is_an_error_not_a_wrong_plan(tmp_path):
    class M(nn.Module):
        def forward(self, x, y):
            return x * y  # [4, 1] * [1, 8]: a broadcast baton's mul cannot express

    with pytest.raises(ExportError, match="broadcast"):
        baton_export.export(M(), (torch.randn(4, 1), torch.randn(1, 8)), tmp_path)


def test_seeded_normal_matches_the_documented_values():
    from baton_export._init import _splitmix64, normal_values

    assert [int(v) for v in _splitmix64(0, 3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4,
                                                   0x06C45D188009454F]
    assert normal_values(42, 2, mean=1.0, std=2.0).tolist() == [1.829439500863061,
                                                                2.305362444303886]


def test_seeded_parameters_are_bitwise_baton_s_init(tmp_path, baton):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.empty(3, 333, dtype=torch.bfloat16))
            baton_export.seeded_normal_(self.w, 5, std=0.5, mean=0.25)
            self.u = nn.Parameter(torch.empty(333))
            baton_export.seeded_uniform_(self.u, 9, -2.0, 3.0)

        def forward(self, x, y):
            return x * self.w, y * self.u

    m = M()
    x, y = torch.ones(3, 333, dtype=torch.bfloat16), torch.ones(2, 333)
    r = baton_export.export(m, (x, y), tmp_path, device="cpu", check=True, baton=baton,
                            verbose=False)
    assert r.weights_path is None
    assert r.errors == {"output.0": 0.0, "output.1": 0.0}


def test_command_line(tmp_path, baton, caps):
    f = tmp_path / "model.py"
    f.write_text("import torch\nfrom torch import nn\n"
                 "def make():\n"
                 "    torch.manual_seed(1)\n"
                 "    return nn.Sequential(nn.Linear(8, 8), nn.Softshrink(0.2)), "
                 "(torch.randn(2, 8),)\n")
    env = dict(os.environ, BATON=baton)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "baton_export", f"{f}:make", "-o", str(out),
                        "--cpu-op", "aten.softshrink", "--dtype", "bf16"]
                       + (["--check"] if caps.weights_format == "safetensors" else []),
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    p = json.loads((out / "plan.json").read_text())
    assert {t["dtype"] for t in p["tensors"] if t["name"] != "output_invvar"} == {"bf16"}
    assert [s["device"] for s in p["steps"]] == ["cuda:0", "cuda:0", "cpu"]
    assert "placed on cpu" in r.stderr
    r = subprocess.run([sys.executable, "-m", "baton_export", f"{f}:nope", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "has no 'nope'" in r.stderr


def test_bundled_rfc_plan_is_the_exporters_output(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from export_rfc import export_rfc

    export_rfc(str(tmp_path / "rfc.json"))
    with open(os.path.join(ROOT, "examples", "plans", "rfc.json")) as f:
        assert f.read() == (tmp_path / "rfc.json").read_text(), \
            "examples/plans/rfc.json is stale: run python3 scripts/export_rfc.py"


def test_a_target_without_a_cuda_implementation_goes_on_the_cpu_with_a_note(tmp_path):
    from baton_export._plan import Plan

    p = Plan("t", device="cuda:0", verbose=False)
    p.cuda_targets = p.cuda_targets - {"softshrink"}  # as a build whose softshrink is CPU-only
    x = p.tensor("x", "f32", [4], role="input")
    y = p.tensor("y", "f32", [4], role="output")
    s = p.step("softshrink", [x], [y])
    assert s["device"] == "cpu"
    assert p.notes == ["step 'y' (softshrink) placed on cpu: baton has no CUDA implementation "
                       "of 'softshrink'"]


def test_decoder_ops_written_as_torch_ops_baton_lower_to_their_targets(tmp_path, baton, caps):
    from baton_export import ops

    H, Hkv, Dh, S = 4, 2, 16, 12

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, H * Dh)
            self.q = nn.Linear(H * Dh, H * Dh, bias=False)
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, Dh, 2) / Dh)))

        def forward(self, ids, pos, k_cache, v_cache):
            h = self.emb(ids)
            q = ops.rope(self.q(h), pos, self.inv_freq, Dh)
            return ops.attention(q, k_cache, v_cache, pos, Dh, H, Hkv)

    args = (torch.tensor([[3, 9, 4]]), torch.tensor([5, 6, 7]), torch.randn(S, Hkv * Dh),
            torch.randn(S, Hkv * Dh))
    r = baton_export.export(Block(), args, tmp_path, device="cpu", verbose=False,
                            weights_format=caps.weights_format)
    assert [s.get("kernel", s.get("delegate")) for s in r.plan["steps"]] == \
        ["embedding", "gemm", "rope", "attention"]
    assert steps(r, "attention")[0]["attrs"] == {"head_dim": Dh, "n_heads": H, "n_kv_heads": Hkv}
    caps.need("embedding", "rope", "attention")
    r = baton_export.export(Block(), args, tmp_path, device="cpu", check=True, baton=baton,
                            verbose=False, weights_format=caps.weights_format)
    assert r.errors["output"] < 1e-5
