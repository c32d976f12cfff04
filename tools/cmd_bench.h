/* The `ropekit bench` subcommand (tools/cmd_bench.c). */
#ifndef ROPEKIT_CMD_BENCH_H
#define ROPEKIT_CMD_BENCH_H

#define ROPEKIT_BENCH_ARGS                                                                     \
    "[--json] [--threads 1,2] [--filter NAME] [--dtypes f32,f16,bf16] [--time S] [--sweep]"
#define ROPEKIT_BENCH_SUMMARY                                                                  \
    "Time every operator on the benchmark shapes (Llama-3-8B, Qwen3-0.6B, Phi, Qwen2.5-VL\n"  \
    "MRoPE, decode, DeepSeek-V4 QKNorm/regroup) with the CPU variant in use: median time,\n"  \
    "bytes moved, GB/s and the ratio to a copy of the same bytes (the faster of memcpy and a\n"  \
    "streaming copy, large rows on buffers out of the caches) measured in the same run.\n"     \
    "--json for programs. tools/bench adds onnxruntime and writes bench/results-cpu.md."

int ropekit_cmd_bench(int argc, char **argv);

#endif
