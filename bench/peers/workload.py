"""workload.py - bench_throughput's prompt ids (bench/workload.c), in plain Python.

run.py (no numpy) and peer.py both need them: the OpenVINO GenAI peer runs the very
prompts our engine runs, and run.py checks our greedy ids against its on them.
"""


def workload_prompts(batch, prompt_len, vocab, bos):
    """batch prompts of prompt_len ids: BOS, then ids 4 .. vocab - 1 from the one 64-bit
    LCG of bench/workload.c, which runs on from one prompt to the next."""
    seed, mask = 12345, (1 << 64) - 1
    out = []
    for _ in range(batch):
        row = [bos]
        for _ in range(1, prompt_len):
            seed = (seed * 6364136223846793005 + 1442695040888963407) & mask
            row.append(4 + (seed >> 33) % (vocab - 4))
        out.append(row)
    return out
