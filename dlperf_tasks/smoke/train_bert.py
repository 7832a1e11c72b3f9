"""A real BERT-style transformer trained on synthetic data (the smoke suite's workload).

Launch it with torchrun (one process per device)::

    torchrun --nnodes 1 --nproc_per_node 2 dlperf_tasks/smoke/train_bert.py \\
        --batch-size 8 --iterations 30

It uses NCCL + CUDA + the BERT-base shape when a GPU is present, gloo + CPU + a tiny
shape otherwise (``--config`` / ``--device`` force either). The model is the usual
encoder: token/position/segment embeddings, N transformer encoder layers, a masked-LM
head tied to the token embedding and a next-sentence head; the loss is MLM + NSP on
randomly masked synthetic tokens. The optimizer is AdamW.

On a CPU every process runs one intra-op thread (``--threads``): one process is one worker, as
one GPU is. Two threads in the 1-process cell and one in each of the 2-process cell's processes
made the baseline erratic on a busy machine (one thread preempted, the other spinning at the
barrier) and the demo's speedup superlinear.

Log format (parsed by ``dlperf_tasks.frameworks.smoke_bert.SmokeBert``)::

    [smoke-bert] config model=tiny hidden=128 layers=2 heads=2 seq=64 ... world_size=2 threads_per_process=1
    [smoke-bert] iteration=7 samples_per_sec=412.50 loss=6.9112 time=1712345678.123456   (rank 0, every iteration)
    [smoke-bert] final rank=1 world_size=2 iterations=30 elapsed_s=4.210                  (every rank, at the end)

``samples_per_sec`` = global batch (batch size per device x world size) / wall time of the
iteration (CUDA synchronised), so rank 0's line is the whole job's throughput.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

PREFIX = "[smoke-bert]"


def _emit(line: str) -> None:
    """Write one whole line with a single write(2): ranks share the log, and print()'s separate
    writes of text and newline let another rank's line land in between (glued lines)."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())

CONFIGS = {
    # name: (hidden, layers, heads, intermediate, vocab, seq_len)
    "tiny": dict(hidden=128, layers=2, heads=2, intermediate=512, vocab=8192, seq=64),
    "base": dict(hidden=768, layers=12, heads=12, intermediate=3072, vocab=30522, seq=128),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Train a BERT-style model on synthetic data and print per-iteration throughput "
        "(the dlperf smoke benchmark). Start it with torchrun, one process per device."
    )
    p.add_argument("--config", choices=["auto", *CONFIGS], default="auto",
                   help="model shape: tiny (CPU), base (BERT-base, GPU); auto picks by device")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="where to train")
    p.add_argument("--batch-size", type=int, default=8, help="batch size per device (process)")
    p.add_argument("--iterations", type=int, default=30, help="training iterations (warm-up + measured)")
    p.add_argument("--seq-len", type=int, default=0, help="sequence length (0 = the config's)")
    p.add_argument("--precision", choices=["fp32", "amp"], default="fp32",
                   help="fp32, or amp (autocast fp16 on GPU, bf16 on CPU)")
    p.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=1234, help="random seed (each rank adds its rank)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads per process (default 1: each process is one worker, as one GPU is, so 1 and "
                        "N processes compare like with like; 0 = cores / local processes)")
    return p


def _model(torch, cfg: dict):
    nn = torch.nn

    class BertLike(nn.Module):
        def __init__(self):
            super().__init__()
            h = cfg["hidden"]
            self.tok = nn.Embedding(cfg["vocab"], h)
            self.pos = nn.Embedding(cfg["seq"], h)
            self.seg = nn.Embedding(2, h)
            self.emb_norm = nn.LayerNorm(h, eps=1e-12)
            self.drop = nn.Dropout(0.1)
            layer = nn.TransformerEncoderLayer(h, cfg["heads"], cfg["intermediate"], dropout=0.1,
                                               activation="gelu", batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
            self.mlm_dense = nn.Linear(h, h)
            self.mlm_norm = nn.LayerNorm(h, eps=1e-12)
            self.mlm_bias = nn.Parameter(torch.zeros(cfg["vocab"]))
            self.pooler = nn.Linear(h, h)
            self.nsp = nn.Linear(h, 2)
            for mod in self.modules():  # BERT's initialisation: N(0, 0.02) weights, zero biases
                if isinstance(mod, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(mod.weight, std=0.02)
                if isinstance(mod, nn.Linear) and mod.bias is not None:
                    nn.init.zeros_(mod.bias)

        def forward(self, ids, segments):
            positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            x = self.drop(self.emb_norm(self.tok(ids) + self.pos(positions) + self.seg(segments)))
            x = self.encoder(x)
            m = self.mlm_norm(nn.functional.gelu(self.mlm_dense(x)))
            mlm_logits = m @ self.tok.weight.t() + self.mlm_bias  # decoder tied to the embedding
            nsp_logits = self.nsp(torch.tanh(self.pooler(x[:, 0])))
            return mlm_logits, nsp_logits

    return BertLike()


def _batch(torch, gen, cfg: dict, batch: int, device):
    """Synthetic pre-training batch: random tokens, 15% masked (id 1 = [MASK]), random NSP labels."""
    seq, vocab = cfg["seq"], cfg["vocab"]
    ids = torch.randint(5, vocab, (batch, seq), generator=gen)
    segments = (torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous()
    mask = torch.rand((batch, seq), generator=gen) < 0.15
    labels = torch.where(mask, ids, torch.full_like(ids, -100))
    inputs = torch.where(mask, torch.ones_like(ids), ids)
    nsp = torch.randint(0, 2, (batch,), generator=gen)
    return [t.to(device) for t in (inputs, segments, labels, nsp)]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.batch_size < 1 or args.iterations < 1:
        print(f"{PREFIX} error: --batch-size and --iterations must be >= 1", file=sys.stderr)
        return 2
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))

    want_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if want_cuda and not torch.cuda.is_available():
        print(f"{PREFIX} error: --device cuda but no CUDA device is visible", file=sys.stderr)
        return 2
    threads = 0
    if want_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        threads = args.threads or max(1, (os.cpu_count() or 1) // local_world)
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:  # already fixed in this process
            pass
    backend = "nccl" if want_cuda else "gloo"
    if world > 1:
        dist.init_process_group(backend=backend)

    name = args.config if args.config != "auto" else ("base" if want_cuda else "tiny")
    cfg = dict(CONFIGS[name])
    if args.seq_len:
        cfg["seq"] = args.seq_len
    torch.manual_seed(args.seed)  # same initial weights on every rank
    model = _model(torch, cfg).to(device)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if want_cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    use_amp = args.precision == "amp"
    amp_dtype = torch.float16 if want_cuda else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp and want_cuda)
    gen = torch.Generator().manual_seed(args.seed + rank)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100)

    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{PREFIX} config model={name} hidden={cfg['hidden']} layers={cfg['layers']} heads={cfg['heads']} "
              f"seq={cfg['seq']} vocab={cfg['vocab']} params={n_params} batch_size_per_device={args.batch_size} "
              f"precision={args.precision} device={device.type} backend={backend} world_size={world} "
              f"threads_per_process={threads or torch.get_num_threads()}", flush=True)

    model.train()
    t_start = time.time()
    for it in range(1, args.iterations + 1):
        inputs, segments, labels, nsp = _batch(torch, gen, cfg, args.batch_size, device)
        t0 = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=use_amp):
            mlm_logits, nsp_logits = model(inputs, segments)
            loss = loss_fn(mlm_logits.float().view(-1, cfg["vocab"]), labels.view(-1)) + loss_fn(nsp_logits.float(), nsp)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        loss_value = loss.item()  # synchronises the device
        if want_cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if not math.isfinite(loss_value):
            print(f"{PREFIX} error: non-finite loss at iteration {it} on rank {rank}", file=sys.stderr, flush=True)
            return 1
        if rank == 0:
            _emit(f"{PREFIX} iteration={it} samples_per_sec={args.batch_size * world / dt:.2f} "
                  f"loss={loss_value:.4f} time={time.time():.6f}")
    elapsed = time.time() - t_start
    if world > 1:
        dist.barrier()
    _emit(f"{PREFIX} final rank={rank} world_size={world} iterations={args.iterations} elapsed_s={elapsed:.3f}")
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
