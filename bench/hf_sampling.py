"""hf_sampling.py: the peers of baton's `sample` (bench/kernels/decoder_peers.py on the GPU,
bench/cpu/peers.py on the CPU): one token drawn from logits [rows, V] as transformers' generate
draws it: logits / temperature, TopKLogitsWarper (x < the k-th largest -> -inf), TopPLogitsWarper
(ascending sort, softmax, cumsum, the tokens whose cumulative mass is <= 1 - top_p -> -inf, the
largest kept), softmax, torch.multinomial."""
import torch


def hf_sample(x, t, top_k, top_p):
    x = x / t
    if top_k:
        kth = torch.topk(x, top_k)[0][..., -1, None]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1:
        srt, idx = torch.sort(x, descending=False)
        cum = srt.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= (1 - top_p)
        drop[..., -1:] = False
        x = x.masked_fill(drop.scatter(1, idx, drop), float("-inf"))
    return torch.multinomial(torch.softmax(x, dim=-1), 1)
