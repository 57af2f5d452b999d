"""Does `torch.compile` of the cached decoding step pay on a CPU? Side by side, one process.

Chapter 9's `decode_step` (one cached step of the decoder) runs as it is ("eager") and compiled
by `torch.compile(dynamic=True)` (Inductor; dynamic, because the cache grows by one position
a step), inside chapter 9's own `greedy_decode` and `beam_search`, one sentence at a time, on
the shipped model (float32, nn.Linear's layout) and test_2016_flickr. The two take turns for
--rounds rounds; each prints its best time per sentence, and the script checks that both
return the same tokens. The compile time (first sentences) is printed apart.

    python bench/bench_compile.py --threads 2
"""
import argparse
import sys
import time
from pathlib import Path

import torch

import annotated_transformer.decoding as decoding
from annotated_transformer.translator import MAX_LEN_B, encode_sources
from annotated_transformer.run.pretrained import load_translator

sys.path.insert(0, str(Path(__file__).parent))
from bench_decoding import cpu_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sentences", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    translator = load_translator(ROOT / "models/multi30k_en_de")
    model = translator.model.eval()
    lines = (Path(a.data) / "test_2016_flickr.en").read_text().splitlines()
    rows = encode_sources(translator.sp, lines[:a.sentences + 3],
                          max_len=model.config.max_len, max_len_b=MAX_LEN_B)
    eager = decoding.decode_step
    steps = {"eager": eager, "compiled": torch.compile(eager, dynamic=True)}

    def translate(step, beam: int, part) -> list:
        decoding.decode_step = step         # what greedy_decode and beam_search call
        try:
            with torch.no_grad():
                if beam == 1:
                    return [decoding.greedy_decode(model, torch.tensor([r]))[0].tolist()
                            for r in part]
                return [decoding.beam_search(model, torch.tensor([r]), beam_size=beam)[0]
                        .tolist() for r in part]
        finally:
            decoding.decode_step = eager

    t0 = time.perf_counter()
    for beam in (1, 4):
        translate(steps["compiled"], beam, rows[:3])
    print(f"{cpu_name()}, {a.threads} threads, kernels "
          f"{torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__}")
    print(f"compiling (first 3 sentences, greedy and beam): {time.perf_counter() - t0:.1f} s")
    for beam in (1, 4):
        best, out = {}, {}
        for _ in range(a.rounds):
            for name, step in steps.items():
                t0 = time.perf_counter()
                out[name] = translate(step, beam, rows[3:])
                ms = (time.perf_counter() - t0) / a.sentences * 1e3
                best[name] = min(best.get(name, ms), ms)
            assert out["eager"] == out["compiled"], "the compiled step changed an output"
        name = "greedy" if beam == 1 else f"beam {beam}"
        print(f"{name:8s} eager {best['eager']:6.1f} ms  compiled {best['compiled']:6.1f} ms"
              f"  ratio {best['eager'] / best['compiled']:.2f}  ({a.sentences} sentences,"
              f" best of {a.rounds}; outputs identical)")


if __name__ == "__main__":
    main()
