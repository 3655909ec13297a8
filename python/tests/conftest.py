"""Shared fixtures: the baton CLI (BATON, else build/baton or build-cpu/baton) and what that build
supports, learnt by validating one-step plans, so a test that needs a feature another work stream
is adding says so when it skips. BATON_EXPORT_REQUIRE_ALL=1 turns those skips into failures."""
import json
import os
import shutil
import subprocess
import tempfile

import random

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _find(name, env):
    p = os.environ.get(env)
    if p:
        return p
    for d in ("build", "build-cpu"):
        c = os.path.join(ROOT, d, name)
        if os.access(c, os.X_OK):
            return c
    return shutil.which(name)


@pytest.fixture(scope="session")
def baton():
    p = _find("baton", "BATON")
    if not p:
        pytest.fail("no baton CLI: build it (bash scripts/test.sh) or set BATON=PATH")
    return p


@pytest.fixture(scope="session")
def generate_exe():
    return _find("generate", "BATON_GENERATE")


def _validate_msg(baton, plan, files=None):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.json")
        with open(path, "w") as f:
            json.dump(plan, f)
        r = subprocess.run([baton, "validate", path], capture_output=True, text=True)
        return r.stderr + r.stdout


def _validates(baton, plan, files=None):
    with tempfile.TemporaryDirectory() as d:
        for name, data in (files or {}).items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        path = os.path.join(d, "p.json")
        with open(path, "w") as f:
            json.dump(plan, f)
        r = subprocess.run([baton, "validate", path], capture_output=True, text=True)
        return r.returncode == 0


def _one_step(target, tensors, inputs, outputs, attrs=None, dims=None):
    p = {"format": "baton.plan", "version": 1, "name": "probe", "tensors": tensors,
         "steps": [{"name": "s", "kernel": target, "device": "cpu", "inputs": inputs,
                    "outputs": outputs, **({"attrs": attrs} if attrs else {})}]}
    if dims:
        p["dims"] = dims
    return p


class Caps:
    def __init__(self, baton):
        f32 = lambda n, s, **k: {"name": n, "dtype": "f32", "shape": s, **k}  # noqa: E731
        self.have = {}
        for t in ("silu", "cast", "silu_mul", "softmax", "gelu", "embedding", "rope",
                  "kv_cache_update", "attention", "sample", "swiglu", "rope_cache_update"):
            # a registered target fails on the signature; an unknown one says "no kernel named"
            self.have[t] = "no kernel named" not in _validate_msg(baton, _one_step(
                t, [f32("a", [4], role="input"), f32("y", [4], role="output")], ["a"], ["y"]))
        r = subprocess.run([baton, "targets", "--json"], capture_output=True, text=True)
        try:
            names = {t["name"] for t in json.loads(r.stdout).get("targets", [])}
        except ValueError:
            names = set()
        for t in ("gemm_add", "rms_norm_gemm", "swiglu_gemm_add"):
            self.have[t] = t in names
        self.have["view_of"] = _validates(baton, _one_step(
            "copy", [f32("a", [2, 2], role="input"), f32("v", [4], view_of="a"),
                     f32("y", [4], role="output")], ["v"], ["y"]))
        st = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
        st = len(st).to_bytes(8, "little") + st + b"\0\0\x80\x3f"
        self.have["safetensors"] = _validates(baton, _one_step(
            "copy", [f32("w", [1], role="constant", init={"kind": "safetensors",
                                                           "path": "w.safetensors", "key": "w"}),
                     f32("y", [1], role="output")], ["w"], ["y"]), {"w.safetensors": st})

    def need(self, *features):
        missing = [f for f in features if not self.have.get(f)]
        if missing:
            msg = f"this baton build lacks {', '.join(missing)} (not on main yet)"
            if os.environ.get("BATON_EXPORT_REQUIRE_ALL") == "1":
                pytest.fail(msg)
            pytest.skip(msg)

    @property
    def weights_format(self):
        return "safetensors" if self.have.get("safetensors") else "npy"


@pytest.fixture(scope="session")
def caps(baton):
    return Caps(baton)


# One seed per run, printed, replayable with BATON_TEST_SEED=N (as the C suite does).
SEED = int(os.environ.get("BATON_TEST_SEED") or random.SystemRandom().randrange(1 << 31))
os.environ["BATON_TEST_SEED"] = str(SEED)


def pytest_report_header(config):
    return f"test seed: {SEED} (BATON_TEST_SEED={SEED} replays this run)"
