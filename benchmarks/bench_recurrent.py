"""Training-step time of pytorch/examples' word language model (LSTM, GRU, Transformer) in float32 and AMP.

The default sizes of pytorch/examples' word_language_model: embedding and hidden
size 200, two layers, 35 steps of a batch of 20; the vocabulary here is 1,000
random tokens, so that the recurrent body, not the decoder, dominates. One step
is forward, loss, backward, gradient clipping and SGD; AMP is autocast(float16)
with a GradScaler. The recurrent layers run as composed ops (one ``linear`` for
a layer's input projection, then per time step one ``linear`` and the gate
arithmetic), so the op count per step is printed too.

    python benchmarks/bench_recurrent.py [--json benchmarks/bench_recurrent.json] [--rounds 3]
"""

from __future__ import annotations

import argparse

import tinyamp as ta
from common import interleaved, machine, table, write_json
from tinyamp.autograd.function import Function

VOCAB, EMB, BPTT, BATCH = 1_000, 200, 35, 20


class WordModel(ta.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.encoder = ta.nn.Embedding(VOCAB, EMB)
        if kind == "Transformer":
            self.body = ta.nn.TransformerEncoder(ta.nn.TransformerEncoderLayer(EMB, 2, EMB, dropout=0.2), 2)
        else:
            self.body = getattr(ta.nn, kind)(EMB, EMB, num_layers=2, dropout=0.2)
        self.decoder = ta.nn.Linear(EMB, VOCAB)

    def forward(self, x: ta.Tensor) -> ta.Tensor:
        h = self.encoder(x)
        if self.kind == "Transformer":
            mask = ta.nn.Transformer.generate_square_subsequent_mask(x.shape[0])
            return self.decoder(self.body(h, mask=mask))
        return self.decoder(self.body(h)[0])


def step_factory(kind: str, amp: bool):
    ta.manual_seed(0)
    model = WordModel(kind)
    optimizer = ta.optim.SGD(model.parameters(), lr=20)
    scaler = ta.amp.GradScaler("cpu", enabled=amp)
    data = ta.randint(0, VOCAB, (BPTT + 1, BATCH))

    def step() -> None:
        optimizer.zero_grad()
        with ta.autocast("cpu", dtype=ta.float16, enabled=amp):
            logits = model(data[:-1])
            loss = ta.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), data[1:].reshape(-1))
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        ta.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        scaler.step(optimizer)
        scaler.update()

    return step


def ops_per_step(step) -> int:
    count = [0]
    original = Function.__call__

    def counting(self, *args):
        count[0] += 1
        return original(self, *args)

    Function.__call__ = counting
    try:
        step()
    finally:
        Function.__call__ = original
    return count[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="benchmarks/bench_recurrent.json")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results, rows = {}, []
    for kind in ("LSTM", "GRU", "Transformer"):
        steps = {f"{kind} float32": step_factory(kind, False), f"{kind} AMP": step_factory(kind, True)}
        ops = {name: ops_per_step(step) for name, step in steps.items()}
        timed = interleaved(steps, rounds=args.rounds, repeats=3, warmup=1, min_time=0.5)
        f32, amp = (timed[name]["median"] for name in steps)
        for name, r in timed.items():
            rows.append([name, f"{r['median'] * 1e3:.1f} ms", f"{r['min'] * 1e3:.1f}", f"{r['max'] * 1e3:.1f}",
                         str(ops[name]), f"{r['median'] / f32:.2f}x"])
            results[name] = {**r, "ops_per_step": ops[name]}
        results[f"{kind} AMP / float32"] = amp / f32
    print(table(rows, ["step", "median", "min", "max", "ops", "vs float32"]))
    write_json(args.json, {"machine": machine(), "sizes": {"vocab": VOCAB, "emb": EMB, "bptt": BPTT,
                                                          "batch": BATCH}, "results": results})


if __name__ == "__main__":
    main()
