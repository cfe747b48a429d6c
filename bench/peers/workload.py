"""workload.py - what run.py (no numpy) and peer.py share about the workload, in plain
Python: bench_throughput's prompt ids (bench/workload.c), which the OpenVINO GenAI peer
runs and run.py checks our greedy ids against its on, and OpenVINO's KV block size,
which both its pool size and its eviction sizes are counted in.
"""

OV_BLOCK = 32  # OpenVINO GenAI's KV block size on the CPU (tokens)


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
