"""A probe for issue 37's next step: part 9b's static step compiled ahead of time by
AOTInductor (`torch.export` + `aoti_compile_and_package`) and loaded by a fresh process
without TorchDynamo, against chapter 9's eager decoder.

On the shipped model in float32 with the weights as the Translator decodes them on a CPU
(`decoding_model`), for one test sentence, greedy:
  - build: export and compile the step for that sentence's shapes (one row, the output
    and source buckets) into a .pt2 package in a temporary folder (one process);
  - first: in a fresh process per engine and round, engines taking turns, the seconds from
    the start of the process to its first translation's tokens (imports and model loading
    included), and of the first translation alone; "aot" loads the package through
    PyTorch's C++ package loader;
  - step: milliseconds per decoding step, the median of --repeats passes, in that process;
  - the tokens of every engine must be the same.
Nothing here is part of the library yet; part 9d's `CompiledStep` compiles through Dynamo.

    python bench/probe_aoti.py --threads 2
"""
import time

START = time.perf_counter()              # before `import torch`: the first call's cost

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows."
ENGINES = ("eager", "aot")


class _Step(torch.nn.Module):
    "static_step with the cache's buffers as inputs, as torch.export needs them."

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, token, t, self_k, self_v, cross_k, cross_v, src_mask):
        from annotated_transformer.engines.static import StaticCache, static_step
        cache = StaticCache.__new__(StaticCache)
        cache.self_k, cache.self_v, cache.cross_k, cache.cross_v = (
            self_k, self_v, cross_k, cross_v)
        cache.src_mask = src_mask
        return static_step(self.model, token, t, cache)


def _setup(a):
    "The decoding model and the sentence's source ids, as the Translator makes them."
    from annotated_transformer.engines.quantization import decoding_model
    from annotated_transformer.translator import MAX_LEN_B, encode_sources
    from annotated_transformer.run.pretrained import load_translator
    torch.set_num_threads(a.threads)
    tr = load_translator(a.model_dir, device="cpu")
    model = decoding_model(tr.model, "fp32", torch.device("cpu")).eval()
    row = encode_sources(tr.sp, [SENTENCE], max_len=model.config.max_len,
                         max_len_b=MAX_LEN_B)[0]
    return model, torch.tensor([row])


def build(a) -> dict:
    from annotated_transformer.decoding import MAX_LEN_A, MAX_LEN_B, prepare_decoding
    from annotated_transformer.engines.static import StaticCache, bucket
    model, src = _setup(a)
    with torch.no_grad():
        _, _, limit = prepare_decoding(model, src, None, MAX_LEN_A, MAX_LEN_B)
        c = StaticCache(model, 1, bucket(int(limit.max())), bucket(src.size(1)))
        t0 = time.perf_counter()
        program = torch.export.export(_Step(model), (
            torch.ones(1, 1, dtype=torch.long), torch.tensor([0]), c.self_k, c.self_v,
            c.cross_k, c.cross_v, c.src_mask))
        t1 = time.perf_counter()
        torch._inductor.aoti_compile_and_package(program, package_path=a.package)
    return {"export_s": t1 - t0, "compile_s": time.perf_counter() - t1,
            "package_mib": Path(a.package).stat().st_size / 2**20}


def first(engine: str, a) -> dict:
    from annotated_transformer.decoding import greedy_decode
    from annotated_transformer.engines.static import static_greedy_decode
    model, src = _setup(a)
    t0 = time.perf_counter()
    if engine == "aot":
        loader = torch._C._aoti.AOTIModelPackageLoader(a.package, "model", False, 1, -1)
        step = lambda m, token, t, c: loader.run(
            [token, t, *c.self_k, *c.self_v, *c.cross_k, *c.cross_v, c.src_mask])[0]
        run = lambda: static_greedy_decode(model, src, step=step)[0]
    else:
        run = lambda: greedy_decode(model, src)[0]
    with torch.inference_mode():
        ids = run()
        done = time.perf_counter()
        times = []
        for _ in range(a.repeats):
            t1 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t1)
    steps = ids.size(1) - 1
    return {"from_start_s": done - START, "first_s": done - t0, "ids": ids.tolist(),
            "ms_per_step": 1e3 * statistics.median(times) / steps, "steps": steps}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=str(ROOT / "models" / "multi30k_en_de"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--package", help=argparse.SUPPRESS)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        out = build(a) if a.worker == "build" else first(a.worker, a)
        print(json.dumps(out))
        return

    def spawn(worker: str) -> dict:
        cmd = [sys.executable, __file__, "--worker", worker, "--package", a.package,
               "--model-dir", a.model_dir, "--threads", str(a.threads),
               "--repeats", str(a.repeats)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{worker} failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.splitlines()[-1])

    from annotated_transformer.utils import hardware
    with tempfile.TemporaryDirectory() as tmp:
        a.package = str(Path(tmp) / "step.pt2")
        built = spawn("build")
        rounds = [{e: spawn(e) for e in ENGINES} for _ in range(a.rounds)]
    print(f"{hardware()}; PyTorch kernels {torch.backends.cpu.get_cpu_capability()}; "
          f"{a.threads} threads; torch {torch.__version__}; {a.rounds} rounds, a fresh "
          f"process per engine and round, engines taking turns")
    print(f"build, once: export {built['export_s']:.1f} s, AOTInductor compile "
          f"{built['compile_s']:.1f} s, package {built['package_mib']:.1f} MiB")
    print("| engine | process start to first tokens, s | first translation, s | "
          "ms per step |\n|---|---:|---:|---:|")
    for e in ENGINES:
        col = lambda k: [r[e][k] for r in rounds]
        print(f"| {e} | {statistics.median(col('from_start_s')):.2f} "
              f"[{min(col('from_start_s')):.2f}, {max(col('from_start_s')):.2f}] | "
              f"{statistics.median(col('first_s')):.3f} | "
              f"{statistics.median(col('ms_per_step')):.2f} "
              f"[{min(col('ms_per_step')):.2f}, {max(col('ms_per_step')):.2f}] |")
    ratios = [r["eager"]["ms_per_step"] / r["aot"]["ms_per_step"] for r in rounds]
    print(f"step, eager / aot, by round: {', '.join(f'{x:.2f}' for x in ratios)}; "
          f"{rounds[0]['aot']['steps']} steps")
    same = all(r[e]["ids"] == rounds[0]["eager"]["ids"] for r in rounds for e in ENGINES)
    print("tokens identical across engines and rounds:", same)


if __name__ == "__main__":
    main()
