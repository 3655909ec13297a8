"""torch_peer_copy.py: PyTorch's GPU-to-GPU copy, b.copy_(a) from cuda:0 to cuda:1, the peer figure
that bench_multigpu's copies (cudaMemcpyPeerAsync, a peer-reading kernel, baton's transfer) are
read against, at the same sizes (16 MiB to 1 GiB). Each size: --rounds rounds of --reps copies,
timed by the wall clock between synchronisations of both GPUs; the median round, in GB/s.

    python3 bench/multigpu/torch_peer_copy.py [--reps 20] [--rounds 5]
Lines starting with RESULT are for scripts/gpu-all.sh's summary.
"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if torch.cuda.device_count() < 2:
        print(f"torch_peer_copy: needs two CUDA devices, found {torch.cuda.device_count()}")
        return
    print(f"torch {torch.__version__}: peer access cuda:0 -> cuda:1 "
          f"{torch.cuda.can_device_access_peer(1, 0)}")
    for mib in (16, 64, 256, 1024):
        n = mib << 20
        a = torch.arange(n // 4, dtype=torch.int32, device="cuda:0")
        b = torch.empty(n // 4, dtype=torch.int32, device="cuda:1")
        for _ in range(3):
            b.copy_(a)
        times = []
        for _ in range(args.rounds):
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            t0 = time.perf_counter()
            for _ in range(args.reps):
                b.copy_(a)
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            times.append((time.perf_counter() - t0) / args.reps)
        if not torch.equal(b.cpu(), a.cpu()):
            print(f"torch peer copy {mib} MiB: wrong bytes, not reported")
            continue
        gbs = n / statistics.median(times) / 1e9
        print(f"torch peer copy {mib:7.1f} MiB   b.copy_(a) cuda:0 -> cuda:1 {gbs:7.1f} GB/s")
        print(f"RESULT torch_peer.{n} gbs {gbs:.2f}")


if __name__ == "__main__":
    main()
