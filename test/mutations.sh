#!/usr/bin/env bash
# Do the tests catch real bugs? Puts known bugs into copies of this working tree, one bug per
# copy at a time, rebuilds what the bug touches, runs the cheapest suites that must catch it,
# and prints a caught/survived table and "N of M caught". Not part of make test: `make
# mutations` runs all of them, JOBS side by side (docs/hardening.md says how long it takes).
#
#   test/mutations.sh [NAME...]      all of them, or those whose name contains a NAME
#   JOBS=4 test/mutations.sh         bugs tried side by side, each in its own copy (default 2)
#   MUTATIONS_PART=K/N test/mutations.sh   only the bugs whose index i (0-based) has i % N == K
#                                    (CI's rotating quarter, .ci/run)
#
# First every suite used runs on a copy as it is and must pass (else a "caught" would mean
# nothing). Exit status 0 when every bug was caught; 1 when one survived or could not be
# applied (its text is no longer in the source: update the table). Needs what make test
# needs, with the CUDA toolkit's headers for the CPU runtime (train_gpt_cpu, the GPU tests).
# A bug is "caught" when its suite exits non-zero; one that does not even build counts as
# not applied, since a compiler error is not a test.
#
# A line of the table is NAME|FILE|SED|TARGETS|SUITE:
#   NAME     unique; what the bug is (the table's first column)
#   FILE     the one file the bug is planted in
#   SED      a sed expression (sed -e) that plants it; it must change FILE
#   TARGETS  the programs to rebuild, or "auto": the programs of make test that the SUITE
#            names (in its command, in the script it runs, and the order-only prerequisites of
#            those, e.g. test/gpu_trainer/trainer_cpu runs train_gpt_cpu); the bug is "NOT APPLIED" when
#            `make -n -W FILE` rebuilds none of them, i.e. no program the suite runs uses FILE;
#            or "none": nothing is built: FILE is a script the suite runs as it is (.sh, .py), or
#            what the suite compiles itself (test/cpu_runtime/headers.sh)
#   SUITE    the command that must fail (exit non-zero) with the bug; split at spaces, so a
#            doctest filter writes a name's spaces as * (a filter that runs no test fails)
# A copy starts from the working tree as it is, built programs included (timestamps kept), so
# only what the bug touches is rebuilt.
{  # read whole before it runs: the file may be edited (or checked out) while it runs
set -u -f  # -f: the suites' -tc=NAME* patterns are doctest's, not the shell's
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
PART=${MUTATIONS_PART:-}
base=$(mktemp -d /tmp/mutations.XXXXXX)
trap 'rm -rf "$base"' EXIT
trap 'exit 143' INT TERM  # so that the EXIT trap removes the copies
mkdir "$base/0" && tar --exclude=./.git -cf - . | tar -xf - -C "$base/0"
cd "$base/0"
export OMP_WAIT_POLICY=passive

golden="./test/cpu_trainer/check_reference test/golden/model_tiny.bin test/golden/reference_tiny.bin"
llama_golden="./test/cpu_trainer/check_reference test/golden/llama_tiny.bin test/golden/llama_reference_tiny.bin"
# The table: NAME | FILE | SED COMMAND | MAKE TARGETS (or auto) | SUITE (the command that must fail)
mutations=(
"no gradient zeroing|train.cpp|/^    std::fill(m.grads.begin(), m.grads.end(), 0.0f);\$/d|test/cpu_trainer/check_reference|$golden"
"loss scaled by 1/(B*T*A), not 1/(B*T*A*R)|train_gpt.cu|s#model_loss(m, B, T, true, 1.0f / (float)plan.global_tokens())#model_loss(m, B, T, true, 1.0f / (float)(plan.B * plan.T * plan.A))#|train_gpt_cpu|bash test/replicas/gpu_replicas.sh"
"all-reduce of the gradients skipped (--grad-sync end)|train_gpt.cu|s#else comm.allreduce_sum(m.grads_buf.ptr, m.shard.padded);#else {}#|train_gpt_cpu|bash test/replicas/grad_sync.sh"
"AdamW without bias correction|train.cpp|s#float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;#float inv_bc1 = 1.0f, inv_bc2 = 1.0f;#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=AdamW*"
"clipping always scales by grad_clip/norm|train.cpp|s#(grad_clip > 0 \&\& norm > grad_clip) ?#(grad_clip > 0) ?#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=clipping*"
"LayerNorm backward drops the xhat*mean(g*xhat) term|train.cpp|s#dx\[c\] = s \* (d\[c\] \* w\[c\] - g_mean - (x\[c\] - m) \* s \* gx_mean);#dx[c] = s * (d[c] * w[c] - g_mean);#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=layernorm*"
"causal mask off by one (t sees t+1)|train.cpp|/^void attention_forward/,/^void attention_backward/ s#const int last = P + t;#const int last = P + t + (t + 1 < T);#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=attention*"
"RoPE's frequencies theta^(-i/hs), not theta^(-2i/hs)|host/model.h|s#double f = std::pow((double)c.rope_theta, -2.0 \* i / c.hs());#double f = std::pow((double)c.rope_theta, -1.0 * i / c.hs());#|test/cpu_trainer/check_reference|$llama_golden"
"RMSNorm subtracts the mean (LayerNorm's)|train.cpp|s#for (int c = 0; c < C; c++) o\[c\] = x\[c\] \* s \* w\[c\];#for (int c = 0; c < C; c++) o[c] = (x[c] - x[0]) * s * w[c];#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=RMSNorm*"
"RoPE backward rotates forward, not back|train.cpp|s#d\[0\] = d0 \* c + d1 \* s, d\[1\] = -d0 \* s + d1 \* c;#d[0] = d0 * c - d1 * s, d[1] = d0 * s + d1 * c;#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=RoPE*"
"Llama-3.1 RoPE scaling without the blended band|host/model.h|s#} else if (wavelen >= high_wavelen) {#} else if (false) {#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=*three*bands*"
"SwiGLU's up gradient without silu|train.cpp|s#dup\[j\] = d\[j\] \* g \* sg;#dup[j] = d[j] * g;#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=SwiGLU*"
"grouped-query attention reads K/V head h, not h/G|train.cpp|s#const int k_at = C + (h / group) \* hs, v_at = C + (KVH + h / group) \* hs;#const int k_at = C + (h % KVH) * hs, v_at = C + (KVH + h % KVH) * hs;#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=grouped*"
"GQA backward: only the group's first head adds into dK/dV|train.cpp|s#for (int h = kh \* group; h < (kh + 1) \* group; h++)\$#for (int h = kh * group; h < kh * group + 1; h++)#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=grouped*"
"Llama's untied head reads wte|train.cpp|s#matmul_forward(a.logits, a.lnf, c.tied_head() ? p.wte : p.wout#matmul_forward(a.logits, a.lnf, p.wte#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=*whole*Llama*"
"llm.c's Llama file read without reordering gate and up|host/checkpoint.h|s#if (cfg.llama() \&\& h\[16\] != LLAMA_EXTENSION) {\$#if (false) {#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=llm.c*"
"weight decay on every tensor|host/checkpoint.h|s#^inline bool param_decays(int tensor) {\$#&\n    if (tensor >= 0) return true;#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=AdamW*"
"every replica reads rank 0's data|host/data.h|s#((long long)a \* R_ + rank_) \* B_ \* T_#((long long)a * R_ + 0) * B_ * T_#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=replicas*"
"m and v swapped in the state file|host/checkpoint.h|s#{m, n \* sizeof(float)}, {v, n \* sizeof(float)}#{v, n * sizeof(float)}, {m, n * sizeof(float)}#|train test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=2N*"
"__syncthreads missing in LayerNorm's backward|gpu/layernorm.cuh|/lane_w\[threadIdx.y\]\[threadIdx.x\] = sw/{n;/__syncthreads/d}|dev/cuda/layernorm_cpu|env CPU_CUDA_RACECHECK=1 dev/cuda/layernorm_cpu --check"
"__syncthreads missing in fused LayerNorm backward|gpu/layernorm.cuh|/ln_sums\[c\] = 0.0f;/{n;/__syncthreads/d}|dev/cuda/layernorm_cpu|env CPU_CUDA_RACECHECK=1 dev/cuda/layernorm_cpu --check"
"validation loss from one replica only|host/eval.h|s#return comm.allreduce_sum(sum) / (double)v.tokens();#return sum * comm.world / (double)v.tokens();#|train_gpt_cpu|bash test/replicas/gpu_replicas.sh"
"clipping always scales, in the GPU trainer|train_gpt.cu|s#(grad_clip > 0 \&\& norm > grad_clip) ?#(grad_clip > 0) ?#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=clipping*"
"flash forward (tensor cores): output not rescaled when the row maximum grows|gpu/flash_attention_mma.cuh|/o\[n\]\[0\] \*= alpha\[0\]/d|test/gpu_trainer/flash_attention_cpu|./test/gpu_trainer/flash_attention_cpu -tc=fused*"
"flash forward (tensor cores): the diagonal tile shows row t key t+1|gpu/flash_attention_mma.cuh|s#if (acc_col(n, e) > warp_row + acc_row(e)) s\[n\]\[e\] = -INFINITY;#if (acc_col(n, e) > warp_row + acc_row(e) + 1) s[n][e] = -INFINITY;#|test/gpu_trainer/flash_attention_cpu|./test/gpu_trainer/flash_attention_cpu -tc=*causal*"
"flash dk/dv (tensor cores): key t+1 counted for query t|gpu/flash_attention_mma.cuh|s#return key > query #return key > query + 1 #|test/gpu_trainer/flash_attention_cpu|./test/gpu_trainer/flash_attention_cpu -tc=*causal*"
"fused classifier: the running sum not rescaled when the row maximum grows|gpu/crossentropy.cuh|s#(m == -INFINITY ? 0.0f : s \* expf(m - mm))#(m == -INFINITY ? 0.0f : s)#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=*classifier*"
"fused backward: the DGELU epilogue dropped (no gelu' on fcproj's input gradient)|gpu/matmul.cuh|s#if (gelu_in) di.epilogue = CUBLASLT_EPILOGUE_DGELU, di.aux#if (gelu_in) di.aux#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=matmul*"
"fused backward: BGRADB's bias gradient overwrites instead of adding|gpu/matmul.cuh|s#if (dbias) sum_partials_add(dbias, scratch, 1, OC);#if (dbias) CUDA_CHECK(cudaMemcpyAsync(dbias, scratch, OC * sizeof(float), cudaMemcpyDeviceToDevice, ctx.stream));#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=matmul*"
"gradient bucket started before its block's backward is done (train)|train.cpp|/if (sync) sync->block_done(l);/d; s#^        // d.dresidual holds ∂loss/∂(output of block l)\$#&\n        if (sync) sync->block_done(l);#|train|bash test/replicas/grad_sync.sh"
"gradient bucket started before its block's backward is done (train_gpt)|train_gpt.cu|/if (sync) sync->block_done(l);/d; s#^        // d.dresidual holds ∂loss/∂(output of block l)\$#&\n        if (sync) sync->block_done(l);#|train_gpt_cpu|bash test/replicas/grad_sync.sh"
"noise scale at A = 1: a bucket's norm units not measured before its sum starts|host/gradsync.h|s#if (armed_ \&\& measure_) (\*measure_)(buckets_\[b\].units);#if (false) (*measure_)(buckets_[b].units);#|train|bash test/replicas/grad_sync.sh"
"gradient sync: never overlapped (as at A = 1 with the noise scale before)|host/gradsync.h|s#return overlap \&\& world > 1;#return overlap \&\& world > 1 \&\& false;#|train_gpt_cpu|bash test/replicas/grad_sync.sh"
"bf16 gradient sync: every range unpacked from the start of the packed bucket|gpu/replicas.cuh|s#side_staging.ptr + packed, r.count);#side_staging.ptr, r.count);#|train_gpt_cpu|bash test/replicas/grad_sync.sh"
"planner: the kernel table prices a bf16 gradient sync at fp32's 4 bytes a value|gpu/plan.cuh|s#o.sync_grad_bytes = config.grad_sync_dtype == \"bf16\" ? 2 : 4;#o.sync_grad_bytes = 4;#|train_gpt_cpu|bash test/replicas/grad_sync.sh"
"--zero 1 timed checkpoint: rank 0's decision not shared (the others never save by time)|host/run.h|s#            by_time = due;#            by_time = due \&\& comm.rank == 0;#|train_gpt_cpu|bash test/replicas/gpu_zero.sh"
"overlapped sync: the last bucket (wte, wpe) never started|host/gradsync.h|/^        while (next_ < buckets_.size()) start(next_++);$/d|auto|bash test/replicas/gpu_replicas.sh"
# ---- issue 37: the features added since the first audit (TARGETS auto: derived from the Makefile)
"lr warm-up one step late (step 0 trains at lr 0)|host/schedule.h|s#return peak \* (step + 1) / warmup;#return peak * step / warmup;#|auto|./test/cpu_trainer/trainer -tc=learning*"
"cosine progress over all steps, not those after warm-up|host/schedule.h|s#float(step - warmup) / float(total - warmup)#float(step - warmup) / float(total)#|auto|./test/cpu_trainer/trainer -tc=learning*"
"the trainers' schedule has no cosine floor|host/schedule.h|s#return {cfg.lr, cfg.warmup, steps, cfg.lr_final_frac,#return {cfg.lr, cfg.warmup, steps, 0.0f,#|auto|./test/cpu_trainer/trainer -tc=learning*"
"noise: the small batch's norm² scaled by A·R, not (A·R)²|host/noise.h|s#return buffer_norm_squared \* scale \* scale;#return buffer_norm_squared * scale;#|auto|./test/cpu_trainer/noise_estimator"
"noise: a resumed run starts its averages from zero|host/run.h|/noise.restore(st.noise);/d|auto|./test/cpu_trainer/trainer -tc=resume*"
"cgroup quota divided by the default period, not the file's|host/cpus.h|s#quota_us / period_us)#quota_us / 100000)#|auto|./test/cpu_trainer/trainer -tc=threads*"
"cgroup: the largest of the ancestors' quotas wins|host/cpus.h|s#cpus = cpus ? std::min(cpus, q) : q;#cpus = cpus ? std::max(cpus, q) : q;#|auto|./test/cpu_trainer/trainer -tc=threads*"
"cgroup: only the process's own cgroup is read, not its ancestors|host/cpus.h|/if (path.empty()/s#if (.*) return;#return;#|auto|./test/cpu_trainer/trainer -tc=threads*"
"data: every shard ends where the first shard ends|host/data.h|s#if (++pos_.chunk == chunks_in(shards_\[shard\]))#if (++pos_.chunk == chunks_in(shards_[0]))#|auto|./test/cpu_trainer/trainer -tc=data*"
"data: the shards in the same order every epoch|host/data.h|s#permute(order, mix_seed(seed_, (uint64_t)epoch));#permute(order, mix_seed(seed_, 0));#|auto|./test/cpu_trainer/trainer -tc=data*"
"data: a shard's chunks in the same order every epoch|host/data.h|s#mix_seed(seed_, (uint64_t)epoch, (uint64_t)shard_order_#mix_seed(seed_, 0, (uint64_t)shard_order_#|auto|./test/cpu_trainer/trainer -tc=data*"
"data: a resumed position keeps the first shard's chunk order|host/data.h|/^        pos_ = p;\$/{n;/load_order/d}|auto|./test/cpu_trainer/trainer -tc=data*"
"data: uint32 tokens (Llama-3's shards) cut to 16 bits, as a uint16 reader would|host/data.h|s#inputs\[i\] = (int)src\[i\];#inputs[i] = (int)(uint16_t)src[i];#|auto|./test/cpu_trainer/trainer -tc=data*"
"data: uint16 and uint32 shards accepted in one run|host/data.h|s#if (!shards_.empty() \&\& header.token_bytes != token_bytes_)#if (false)#|auto|./test/cpu_trainer/trainer -tc=data*"
"ZeRO (CPU): the clipping norm of this replica's shard only|train.cpp|s#? sq : comm.allreduce_sum(sq));#? sq : sq);#|auto|bash test/replicas/cpu_zero.sh"
"ZeRO (CPU): a resumed state's moments cut from the start, not the shard|train.cpp|s#m.adam_m\[i - lo\] = file_m\[i\], m.adam_v\[i - lo\] = file_v\[i\];#m.adam_m[i - lo] = file_m[i - lo], m.adam_v[i - lo] = file_v[i - lo];#|auto|bash test/replicas/cpu_zero.sh"
"ZeRO (GPU): the norm from the mean of the shards' squares, not their sum|train_gpt.cu|s#m.sharded() ? means\[2\] \* comm.world : sums\[1\]#m.sharded() ? means[2] : sums[1]#|auto|bash test/replicas/gpu_zero.sh"
"ZeRO (GPU, bf16): resumed master weights taken from the buffer's start|train_gpt.cu|s#const size_t master_from = gpu::weights_copy() ? shard.begin : 0;#const size_t master_from = 0;#|auto|bash test/replicas/gpu_zero.sh"
"bf16 AdamW: a shard refreshes the bf16 weights at its own offset|gpu/adamw.cuh|s#params_x ? params_x + lo : nullptr#params_x ? params_x + at : nullptr#|test/gpu_trainer/trainer_cpu|./test/gpu_trainer/trainer_cpu -tc=ZeRO*"
"flash forward (scalar): the running sum not rescaled when the maximum grows|gpu/flash_attention.cuh|s#s.l\[r\] = s.l\[r\] \* alpha + sum;#s.l[r] = s.l[r] + sum;#|auto|./test/gpu_trainer/flash_attention_cpu_fp32 -tc=fused*"
"flash backward (scalar): dS without the 1/sqrt(hs) scale|gpu/flash_attention.cuh|s#(s.dp\[r \* FLASH_LDS + c\] - s.delta\[r\]) \* scale : 0.0f;#(s.dp[r * FLASH_LDS + c] - s.delta[r]) : 0.0f;#|auto|./test/gpu_trainer/flash_attention_cpu_fp32 -tc=fused*"
"flash dk (tensor cores): stored without the 1/sqrt(hs) scale|gpu/flash_attention_mma.cuh|s#store_rows<N8>(dk_dst, at.width, dk, at.scale,#store_rows<N8>(dk_dst, at.width, dk, 1.0f,#|auto|./test/gpu_trainer/flash_attention_cpu -tc=fused*"
"flash D = rowsum(dy*y) (tensor cores): heads' rows mixed up|gpu/flash_attention_mma.cuh|s#delta\[(b \* NH + h) \* T + t\] = sum;#delta[(b * NH + h) * T + (T - 1 - t)] = sum;#|auto|./test/gpu_trainer/flash_attention_cpu -tc=fused*"
"flash wide forward: the causal mask shows row t key t+1|gpu/flash_attention_wide.cuh|s#if (acc_col(n, e) > offset + 16 \* i + acc_row(e))#if (acc_col(n, e) > offset + 16 * i + acc_row(e) + 1)#|auto|./test/gpu_trainer/flash_attention_cpu -tc=the*wide*forward*against*"
"flash wide forward: the warp's second 16 rows not stored|gpu/flash_attention_wide.cuh|s#        store_rows<N8>(y, at.C, o\[i\], 1.0f, row0 + 16 \* i, T);#        if (i == 0) store_rows<N8>(y, at.C, o[i], 1.0f, row0 + 16 * i, T);#|auto|./test/gpu_trainer/flash_attention_cpu -tc=the*wide*forward*against*"
"--attention auto: a resumed run times the paths again|host/run.h|/^        adopt_recorded_choices(cfg, /,+1d|auto|./test/gpu_trainer/trainer_cpu -tc=*resume*keeps*attention*"
"signal during a validation: stops one step later|host/run.h|s#if (evaluate(step) \&\& !stop.agreed) comm.agree_stop();#evaluate(step);#|auto|bash test/hardening/crash_safety.sh"
"SIGUSR1 (Slurm's --signal) not caught: the run dies without a checkpoint|host/stop.h|s#{SIGINT, SIGTERM, SIGUSR1}#{SIGINT, SIGTERM}#|auto|./test/cpu_trainer/trainer -tc=signals*"
"fc's epilogue: GELU without the bias|gpu/matmul.cuh|s#(bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)#CUBLASLT_EPILOGUE_GELU_AUX#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=matmul*"
"cuBLASLt emulation: aux keeps the GELU's output, not its input|cpu_cuda/cublas_cpu.h|/if (e.aux_out) store_floats(e.aux_type, v, rows, aux());/d;s#^            case Activation::none: break;\$#&\n        }\n        if (e.aux_out) { store_floats(e.aux_type, v, rows, aux());#|auto|./test/cpu_runtime/cublas"
"LayerNorm backward in column chunks: each block's partial sums stored from column 0|gpu/layernorm.cuh|s#partial_w\[(size_t)chunk \* C + c0 + c\] = sw, partial_b\[(size_t)chunk \* C + c0 + c\] = sb;#partial_w[(size_t)chunk * C + c] = sw, partial_b[(size_t)chunk * C + c] = sb;#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=LayerNorm*"
"CPU runtime: over 48 KiB of dynamic shared memory taken without opting in|cpu_cuda/exec.h|s#^    size_t limit = DEFAULT_DYNAMIC_SMEM;\$#    size_t limit = max_dynamic_smem_optin();#|auto|./test/cpu_runtime/execution -tc=dynamic*"
"planner: an overlapped sync hides behind the whole micro-batch, not its backward|host/cost.h|s#if (backward \&\& !k.per_step \&\& k.layer != \"loss\") last_backward += t;#if (!k.per_step) last_backward += t;#|auto|./test/cpu_trainer/plan -tc=*step*predicted*"
# ---- issue 44: the planner knows the family (Llama's FLOPs, kernels, presets, recipe)
"planner: Llama's K and V products counted as wide as q (3C), not KVH·hs|host/cost.h|s#c.L \* C \* ((double)c.qkv_channels() + C#c.L * C * (3.0 * C + C#|auto|./test/cpu_trainer/plan -tc=FLOPs*"
"planner: Llama's kernel table has the qkv product 3C wide|host/cost.h|s#linear_forward(blocks, \"qkv\", C, QKV, L);#linear_forward(blocks, \"qkv\", C, 3 * C, L);#|auto|./test/cpu_trainer/plan -tc=*kernels*Llama*"
"planner: the h200 preset given the H100's memory bandwidth|host/cost.h|s#{\"h200\", 989, 3600, 4800, 67}#{\"h200\", 989, 3600, 3350, 67}#|auto|./test/cpu_trainer/plan -tc=device*figures*"
"--preset llama3.2-1b: F 8320, not the published 8192|host/cli.h|s#--channels 2048 --ffn-hidden 8192#--channels 2048 --ffn-hidden 8320#|auto|./test/cpu_trainer/plan -tc=*preset*published*"
"scripts/llama3_1b.sh: the 8-GPU plan (and run) without --zero 1|scripts/llama3_1b.sh|s#\"\${ARGS\[@\]}\" --zero 1 #\"\${ARGS[@]}\" #|none|bash test/cpu_trainer/llama_recipe.sh"
"scripts/llama3_1b.sh: GPT-2's uint16 shards taken for a Llama-3 run|scripts/llama3_1b.sh|s#^            20240520) echo .*#            20240520) ;;#|none|bash test/cpu_trainer/llama_recipe.sh"
"CPU runtime: __fadd_ru and the other round-up intrinsics step down when the exact value lies above|cpu_cuda/device_math.h|s#if (err > 0 \&\& (mode == Round::ru#if (err < 0 \&\& (mode == Round::ru#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=directed*"
"CPU runtime: labeled_partition keeps the lanes whose label bit is set, whatever this lane's|cpu_cuda/cooperative_groups.h|s#same \&= bit ? ones : ~ones;#same \&= ones;#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=*labeled_partition*"
"CPU runtime: a failed device assert is not sticky (the next sync answers cudaSuccess)|cpu_cuda/exec.h|/if (failed_launch_code == cudaErrorAssert) sticky_error = cudaErrorAssert;/d|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=*assert*"
"CPU runtime: a texture's linear filter weight not kept in 8 fractional bits|cpu_cuda/textures.h|s#{ return std::nearbyint(f \* 256.0) / 256.0; }#{ return f; }#|test/cpu_runtime/samples|./test/cpu_runtime/samples -tc=*linear*filtering*"
"CPU runtime: mirror addressing ignores floor(x)'s parity (it wraps)|cpu_cuda/textures.h|s#((long long)whole \& 1 ? 1.0 - frac : frac)#frac#|test/cpu_runtime/samples|./test/cpu_runtime/samples -tc=*address*modes*"
"CPU runtime: a launch on a capturing stream runs at once instead of becoming a graph node|cpu_cuda/exec.h|s#if (capturing(stream)) {  // a graph's kernel node#if (false) {  // a graph's kernel node#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=graphs*by*stream*capture*"
"CPU runtime: a capture whose forked stream never joins back ends without an error|cpu_cuda/graphs.h|s#    if (unjoined) {#    if (false) {#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=graphs:*refused*"
# ---- issue 43: the CPU runtime stands alone (the header suite compiles them itself: TARGETS none)
"CPU runtime: the pool's cgroup quota, the largest of the ancestors' wins|cpu_cuda/processors.h|s#cpus = cpus ? std::min(cpus, q) : q;#cpus = cpus ? std::max(cpus, q) : q;#|auto|./test/cpu_runtime/execution -tc=pool*size*"
"CPU runtime: a header includes the trainers' code (host/cpus.h)|cpu_cuda/settings.h|s@^#include \"processors.h\"\$@&\n#include \"../host/cpus.h\"@|none|bash test/cpu_runtime/headers.sh"
"CPU runtime: graphs.h compiles only after textures.h (its copy_rows)|cpu_cuda/graphs.h|/^#include \"textures.h\"\$/d|none|bash test/cpu_runtime/headers.sh"
# ---- issue 43: the Trainer contract (the suite compiles host/trainer.h itself: TARGETS none)
"the Trainer contract does not name a missing next_token_logits|host/trainer.h|/TRAINER_NEEDS(next_token_logits, /d|none|bash test/run/trainer_contract.sh"
# ---- issue 44: Llama's GPU layers (gpu/rmsnorm.cuh, gpu/rope.cuh, gpu/swiglu.cuh)
"RMSNorm forward without eps|gpu/rmsnorm.cuh|s#sqrtf(warp_sum(sum) / C + eps)#sqrtf(warp_sum(sum) / C)#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=RMSNorm*"
"RMSNorm forward subtracts the row's mean (LayerNorm's centring)|gpu/rmsnorm.cuh|s#^    float s = 1.0f / sqrtf(warp_sum(sum) / C + eps);\$#    float m = 0;\n    for_row_pieces(x, C, lane, 32, [\&](int i, int count) { Pack<floatX> v = load_part(x + i, count); for (int k = 0; k < count; k++) m += (float)v.v[k]; });\n    m = warp_sum(m) / C;\n&#; s#r.v\[k\] = floatX((float)v.v\[k\] \* s \* (float)wk.v\[k\]);#r.v[k] = floatX(((float)v.v[k] - m) * s * (float)wk.v[k]);#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=RMSNorm*"
"RMSNorm backward drops the xhat*mean(g*xhat) term|gpu/rmsnorm.cuh|s#return s \* (d \* w - x \* s \* gx_mean);#return s * d * w;#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=RMSNorm*"
"RMSNorm backward in column chunks: each block's partial sums stored from column 0|gpu/rmsnorm.cuh|s#partial_w\[(size_t)chunk \* C + c0 + c\] = sw;#partial_w[(size_t)chunk * C + c] = sw;#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=RMSNorm*"
"__syncthreads missing in RMSNorm's backward (sums added before they are zeroed)|gpu/rmsnorm.cuh|/rms_sums\[c\] = 0.0f;/{n;/__syncthreads/d}|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=RMSNorm*"
"RoPE backward rotates forward, not back|gpu/rope.cuh|s#rope_launch(dqkv, cos_sin, -1.0f,#rope_launch(dqkv, cos_sin, 1.0f,#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=RoPE*"
"RoPE leaves the key heads unrotated (q only)|gpu/rope.cuh|s#rotated = (NH + KVH) \* hs;#rotated = NH * hs;#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=RoPE*"
"RoPE: positions counted from 1, not 0|gpu/rope.cuh|s#t = (int)(bt % T);#t = (int)(bt % T) + 1;#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=RoPE*"
"SwiGLU backward: dup without silu (dout*gate)|gpu/swiglu.cuh|s#du.v\[k\] = floatX(dk \* gk \* sg);#du.v[k] = floatX(dk * gk);#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=SwiGLU*"
"SwiGLU backward (bf16): dgate without the derivative of sigma|gpu/swiglu.cuh|s# \* (1.0f + gk \* (1.0f - sg))##|test/gpu_trainer/trainer_cpu|./test/gpu_trainer/trainer_cpu -tc=SwiGLU*"
# ---- issue 44: the GPU trainer's Llama (train_gpt.cu's five choices)
"train_gpt: the untied head reads wte|train_gpt.cu|s#return m.cfg.tied_head() ? m.p.wte : m.p.wout;#return m.p.wte;#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=Llama:*10*"
"train_gpt: RoPE's backward skipped (the gradient left rotated)|train_gpt.cu|s#if (c.llama()) rope_backward(d.dqkv#if (false) rope_backward(d.dqkv#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=Llama:*golden*"
"train_gpt: --recompute 1 redoes GELU, not SwiGLU, for a Llama|train_gpt.cu|s#if (m.k.recompute \&\& c.llama()) swiglu_forward#if (false) swiglu_forward#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=Llama:*10*"
# ---- issue 44: grouped-query attention (KVH < NH K/V heads) on the three GPU attention paths
"GQA flash dk/dv (tensor cores): the group's query heads after the first not summed|gpu/flash_attention_mma.cuh|s#        const int G = NH / KVH;#        const int G = 1;#|auto|./test/gpu_trainer/flash_attention_cpu -tc=grouped*every*path*"
"GQA flash forward and dq (tensor cores): query head h reads K/V head h, not h/G|gpu/flash_attention_mma.cuh|s#kh = h / (NH / KVH);#kh = h;#|auto|./test/gpu_trainer/flash_attention_cpu -tc=grouped*every*path*"
"GQA flash forward and dq (tensor cores): K/V heads interleaved (h % KVH), not grouped (h/G)|gpu/flash_attention_mma.cuh|s#kh = h / (NH / KVH);#kh = h % KVH;#|auto|./test/gpu_trainer/flash_attention_cpu -tc=grouped*every*path*"
"GQA flash forward and dq (scalar): K/V heads interleaved (h % KVH), not grouped (h/G)|gpu/flash_attention.cuh|s#h / (NH / KVH), T, NH, KVH, hs)#h % KVH, T, NH, KVH, hs)#g|auto|./test/gpu_trainer/flash_attention_cpu_fp32 -tc=grouped*every*path*"
"GQA flash forward and dq (scalar): query head h reads K/V head h, not h/G|gpu/flash_attention.cuh|s#h / (NH / KVH), T, NH, KVH, hs)#h, T, NH, KVH, hs)#g|auto|./test/gpu_trainer/flash_attention_cpu_fp32 -tc=grouped*every*path*"
"GQA flash dk/dv (scalar): the group's query heads after the first not summed|gpu/flash_attention.cuh|s#for (int g = 0; g < G; g++) {#for (int g = 0; g < 1; g++) {#|auto|./test/gpu_trainer/flash_attention_cpu_fp32 -tc=grouped*every*path*"
"GQA cuBLAS attention: dv sums the group's first query head only|gpu/attention.cuh|s#hs, T, a.GT, 1.0f, dyr, hs, a.sq#hs, T, T, 1.0f, dyr, hs, a.sq#|auto|./test/gpu_trainer/flash_attention_cpu_fp32 -tc=grouped*every*path*"
"GQA cuBLAS attention: dk sums the group's first query head only|gpu/attention.cuh|s#hs, T, a.GT, 1.0f, q, hs, a.sq#hs, T, T, 1.0f, q, hs, a.sq#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=*grouped-query*"
# ---- issue 46: the attention backward in five products (gpu/flash_attention_bwd5.cuh)
"five-product attention backward: the last query tile's dq term of key tile 1 skipped (its turn still passed on)|gpu/flash_attention_bwd5.cuh|s#add_dq_term<DQ_M, DQ_N8>(dq_partial, dqkv, dq,#if (j == 1 \&\& qt == query_tiles - 1) zero(dq[0]), zero(dq[DQ_M - 1]); add_dq_term<DQ_M, DQ_N8>(dq_partial, dqkv, dq,#|auto|./test/gpu_trainer/flash_attention_cpu -tc=five-product*against*"
"five-product attention backward (hs = 64): dk's B fragments of q reused without movmatrix's transpose|gpu/flash_attention_bwd5.cuh|s#const uint32_t bq\[2\] = {movmatrix_trans(qb\[kk\]\[0\]\[h\]), movmatrix_trans(qb\[kk\]\[1\]\[h\])};#const uint32_t bq[2] = {qb[kk][0][h], qb[kk][1][h]};#|auto|./test/gpu_trainer/flash_attention_cpu -tc=five-product*against*"
"CPU runtime: movmatrix_trans hands back its register untransposed|cpu_cuda/mma.h|s#return pack(st.rows\[2 \* i\]\[g\], st.rows\[2 \* i + 1\]\[g\]);#return x;#|auto|./test/gpu_trainer/flash_attention_cpu -tc=five-product*against*"
# ---- generation: the key/value cache, top-p, the context's restarts, one-row products
"KV cache: GPT-2's position embedding of row t, not of position P + t|train.cpp|s#const float\* pos = wpe + (size_t)(P + t) \* C;#const float* pos = wpe + (size_t)t * C;#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=generation:*key/value*"
"KV cache: Llama's RoPE angles of row t, not of position P + t|train.cpp|s#rope_forward(qkv, m.rope.data() + (size_t)P0 \* c.hs(),#rope_forward(qkv, m.rope.data(),#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=*key/value*"
"KV cache: the new keys written at position 0, not P|train.cpp|s#memcpy(layer + (size_t)(P + t) \* KV,#memcpy(layer + (size_t)t * KV,#|test/cpu_trainer/llama|./test/cpu_trainer/llama -tc=*key/value*"
"KV cache on the GPU: a query does not see its own position|gpu/attention_cached.cuh|s#t2 <= last; t2 += CACHED_WARPS#t2 < last; t2 += CACHED_WARPS#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=generation:*"
"KV cache on the GPU: the warps' partial sums merged without their maxima|gpu/attention_cached.cuh|s#weight\[w\] = expf(warp_m\[w\] - M)#weight[w] = 1.0f#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=generation:*"
"KV cache on the GPU: the new keys and values written at position 0, not P|train_gpt.cu|s#cudaMemcpy2DAsync(layer + (size_t)P \* KV,#cudaMemcpy2DAsync(layer,#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=generation:*"
"top-p ignored (every token stays in the nucleus)|host/sample.h|s#kept < s.top_p \* sum#kept < sum#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=sampling:*"
"a full context restarts from its last token, not its last window/2|host/sample.h|s#tokens.size() - std::max(window / 2, 1)#tokens.size() - 1#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=generation:*restarts*"
"one-row product: the bias dropped|host/gemm.h|s#acc\[g\] = accumulate ? C\[j + g\] : 0.0f;#acc[g] = 0.0f;#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=matmul*one*row*"
"a long line cut at strf's 1,024-byte buffer|host/error.h|s#if (n >= (int)sizeof buf) {#if (false) {#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=*longer*than*strf*"
# ---- the scripts (TARGETS none: the suite runs the file as it is)
"docs' name check: the functions the pages name are not looked for|test/tools/check_docs.py|s#    for m in FUNCTION.finditer(span):#    for m in FUNCTION.finditer(\"\"):#|none|bash test/tools/quoted_outputs.sh --names"
"docs' name check: Class::name() passes where name( is anywhere, not in the class|test/tools/check_docs.py|s#        if not scope:\$#        if True:#|none|bash test/tools/quoted_outputs.sh --names"
"gpu_check.sh: the results go to out/ by default, not out/gpu_check/|scripts/gpu_check.sh|s#^DEFAULT_OUT=out/gpu_check #DEFAULT_OUT=out #|none|bash test/tools/gpu_check.sh"
"gpu_check.sh: the epilogues stage passes whatever the losses differ by|scripts/gpu_check.sh|s#ok = steps == n \&\& !bad \&\& worst <= tol#ok = steps == n \&\& !bad#|none|bash test/tools/gpu_check.sh"
"gpu_check.sh: the default set's caps add up past 300 s|scripts/gpu_check.sh|s#\[build\]=130 \[bench\]=90#[build]=200 [bench]=90#|none|bash test/tools/gpu_check.sh"
# ---- issue 45: Llama-3's tokenizer in the data tools (data/llama3_tokenizer.py, run as it is)
"Llama-3 BPE: the highest-rank pair merges first, not the lowest|data/llama3_tokenizer.py|s#heapq.heappush(heap, (r, a, b, c))#heapq.heappush(heap, (-r, a, b, c))#|none|python3 test/tools/llama3_tokenizer.py"
"Llama-3 BPE: no byte fallback (bytes left unmerged are dropped)|data/llama3_tokenizer.py|s#^            ids.append(ranks\[piece\[s:nxt\[s\]\]\])#            if nxt[s] - s > 1: ids.append(ranks[piece[s:nxt[s]]])#|none|python3 test/tools/llama3_tokenizer.py"
"Llama-3 split without the regex package: \\p{N} taken for the digits 0-9|data/llama3_tokenizer.py|s#L, N, S = _class_of(\"L\"), _class_of(\"N\"), _WHITE_SPACE#L, N, S = _class_of(\"L\"), \"0-9\", _WHITE_SPACE#|none|python3 test/tools/llama3_tokenizer.py"
# ---- issue 45: the Hugging Face converter (scripts/hf_convert.py, run as it is)
"hf_convert.py: Llama's q and k rows left in Hugging Face's rotate_half order on import|scripts/hf_convert.py|/^def hf_to_meta/,/^def meta_to_hf/ s#return w.reshape(heads, 2, rows // heads // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)#return w#|none|bash test/tools/hf_convert.sh"
"hf_convert.py: GPT-2's Conv1D attn.c_proj not transposed on import (square: no shape error)|scripts/hf_convert.py|s#layer(\"attn.c_proj.weight\", (C, C), True)#layer(\"attn.c_proj.weight\", (C, C))#|none|bash test/tools/hf_convert.sh"
# ---- issue 46: the classifier and the loss in row chunks (gpu/classifier.cuh)
"classifier in row chunks: the last, partial chunk skipped|gpu/classifier.cuh|s#for (int n0 = 0; n0 < N; n0 += rows) {#for (int n0 = 0; n0 + rows <= N; n0 += rows) {#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=the*classifier*in*row*chunks*"
"classifier in row chunks: the plan and the buffer hold every row (chunked taken for whole)|gpu/classifier.cuh|s#    if (whole) return N;#    return N;#|test/gpu_trainer/trainer_cpu_fp32|./test/gpu_trainer/trainer_cpu_fp32 -tc=memory:*GPT-2*124M*chunk*"
# ---- issue 46: cuBLASLt's algorithm chosen once per product (gpu/matmul.cuh)
"cuBLASLt algorithms: a resume ignores the recorded ones and chooses again|gpu/matmul.cuh|s#if (plan.step \&\& all.next < all.recorded.size()) {#if (false) {#|train_gpt_cpu|./test/gpu_trainer/trainer_cpu -tc=train_gpt:*keeps*recorded*cuBLASLt*"
"cuBLASLt algorithms: a fused epilogue without an algorithm does not take the separate path|gpu/matmul.cuh|s#lt_dinp = lt_dinp \&\& lt_offers(#lt_dinp = lt_dinp; (void)lt_offers(#|train_gpt_cpu|./test/gpu_trainer/trainer_cpu -tc=train_gpt:*epilogue*no*algorithm*"
# ---- issue 48: trainer, option and script defects
"dry-run tables: the replica count in an int again (doubles to 0 at 2^32 tokens: SIGFPE)|host/cost.h|s#for (long long R = 1; R <= INT_MAX \&\& global#for (int R = 1; global#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"--lr-final-frac below 0 accepted (a negative learning rate)|host/cli.h|s#c.lr_final_frac >= 0 \&\& c.lr_final_frac <= 1#c.lr_final_frac <= 1#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"resume: a state whose header's step is not its name's resumed as the header's|host/run.h|s#if (st.step != step)  //#if (false)  //#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"resume: a state's data epoch not checked against its step|host/checkpoint.h|s#if (st.data.epoch != epoch)#if (st.data.epoch < 0 \&\& epoch < 0)#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"resume: a recorded choice not on the command line switched to the option's default|host/checkpoint.h|s#} else if (value != recorded \&\& !named) {#} else if (false) {#|auto|./test/gpu_trainer/trainer_cpu -tc=train_gpt:*--epilogues*"
"resume: a recorded value the trainer cannot take runs on when the option is given|host/checkpoint.h|s#            validate_config(with);#            if (choice_option(cfg, name) == \"auto\") validate_config(with);#|train train_gpt_cpu|bash test/hardening/bad_inputs.sh"
"-e FILE: shape options ignored without a note|host/run.h|s#            if (!ignored.empty())#            if (false)#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"fineweb.py: --shard-size 0 accepted (empty shards without end)|data/fineweb.py|s#check_range(\"--shard-size\", args.shard_size, 1,#check_range(\"--shard-size\", args.shard_size, 0,#|none|python3 test/tools/data_tools.py"
"sass_report.py: --nvcc that is not there replaced by PATH's nvcc|dev/sass_report.py|s#    if opts.nvcc and not (os.path.isfile#    if False and not (os.path.isfile#|none|python3 test/tools/sass_report.py"
"bench_comm.sh: any host count accepted (300 ran past its timeout)|scripts/bench_comm.sh|s#\[ \"\$R\" -le 16 \]#true#|none|python3 test/tools/data_tools.py"
"text_to_shards.py: an empty input reaches the --val-tokens check ([0, 0))|data/text_to_shards.py|s#    if total == 0:#    if False:#|none|python3 test/tools/data_tools.py"
"shards.py: a shard whose flush fails (a full disk) is left half-written|data/shards.py|s#        except BaseException:#        except ValueError:#|none|python3 test/tools/data_tools.py"
# ---- issue 48: the CPU runtime refuses freed memory and destroyed objects (cpu_cuda/)
"CPU runtime: a graph node's pointers not checked again at launch (a freed, reused address passes)|cpu_cuda/memory.h|s#            if (memory().generation(k.p) != k.generation) {#            if (false) {#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=graphs:*freed*"
"CPU runtime: a texture's memory not checked again after a free|cpu_cuda/textures.h|s#        if (memory().generation(t->base) != t->generation)#        if (false)#|test/cpu_runtime/samples|./test/cpu_runtime/samples -tc=*freed*"
"CPU runtime: a destroyed executable graph or graph is launched or instantiated|cpu_cuda/graphs.h|s#    if (graph_live(graph)) return cudaSuccess;#    if (graph) return cudaSuccess;#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=graphs:*freed*"
"CPU runtime: cudaGetErrorName does not know cudaErrorIllegalState (a code the runtime returns)|cpu_cuda/runtime.h|/{401, \"cudaErrorIllegalState\"/d|auto|./test/cpu_runtime/execution -tc=cudaGetErrorName*"
"CPU runtime: cudaDeviceSynchronize inside a stream capture answers as outside one|cpu_cuda/runtime.h|s#    if (cpu_cuda::invalidate_captures()) {#    if (false) {#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=cudaDeviceSynchronize:*"
"CPU runtime: a launch that failed as it ran is not answered by the next cudaDeviceSynchronize|cpu_cuda/exec.h|/^        pending_error = failed_launch_code;\$/d|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=cudaDeviceSynchronize:*"
# ---- issue 47: cluster layouts on paper (host/cluster.h)
"cluster plan: the 1F1B bubble (P-1)/(A+P), not (P-1)/(A+P-1)|host/cluster.h|s#return (P - 1.0) / (A + P - 1.0);#return (P - 1.0) / (A + P);#|train|bash test/tools/cluster_plan.sh"
"cluster plan: the data-parallel sync of 1/T of the parameters, not 1/(T·P)|host/cluster.h|s#double shard = params / mp;#double shard = params / T;#|train|bash test/tools/cluster_plan.sh"
"--noise-from: the first noise scale logged, not the last|host/cluster.h|s#logged_number(line, \"step\", step))#logged_number(line, \"step\", step) \&\& b.noise_step == 0)#|train|bash test/tools/cluster_plan.sh"
"launcher variables: PMI_SIZE and PMIX_RANK not checked against MPI's job|host/comm_mpi.h|s#(is_size ? n > world : n >= world))#(false))#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"llm.c's Llama-3 header: F solved for before the other fields are checked (NH = 0: SIGFPE)|host/checkpoint.h|s#    if (std::string problem = shape_problem(cfg, false); !problem.empty()) return problem;#    (void)0;#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"a dry run stops on data a real run refuses, again|host/run.h|s#say(std::string(\"warning: a real run would stop here#throw; say(std::string(\"warning: a real run would stop here#|train|bash test/tools/cluster_plan.sh"
"CPU runtime: cudaStreamWaitEvent ignores a record still queued on another stream|cpu_cuda/runtime.h|s#cpu_cuda::stream_queue(s).enqueue(\[clock = e->clock, record\] { clock->wait_for(record); });#(void)record;#|test/cpu_runtime/execution|./test/cpu_runtime/execution -tc=streams*are*independent*"
"CPU runtime: a launch on a stream with queued work runs at once, ahead of that work|cpu_cuda/exec.h|s#        if (queue_behind(stream)) {#        if (false \&\& queue_behind(stream)) {#|test/cpu_runtime/execution|./test/cpu_runtime/execution -tc=streams*are*independent*"
"CPU runtime: CPU_CUDA_DELAY_STREAM delays nothing|cpu_cuda/streams.h|s#    return own.delay_ms > 0 #    return false #|test/cpu_runtime/execution|./test/cpu_runtime/execution -tc=CPU_CUDA_DELAY_STREAM*"
"overlapped sync: a bucket's collectives not ordered after the compute stream's backward (no wait on bucket_ready)|gpu/replicas.cuh|s#CUDA_CHECK(cudaStreamWaitEvent(side, bucket_ready, 0));#(void)0;#|train_gpt_cpu|bash test/replicas/grad_sync.sh"
"overlapped sync: the last bucket started after the final wait|host/gradsync.h|/^        while (next_ < buckets_.size()) start(next_++);$/d; s#^        comm.wait_sums();\$#&\n        while (next_ < buckets_.size()) start(next_++);#|train_gpt_cpu|bash test/replicas/grad_sync.sh"
"OMP_NUM_THREADS: a malformed value left for libgomp (its warnings before the trainer's line)|host/cpus.h|s#        if (name\[i\] .. omp_num_threads_well_formed(s + i)) continue;#        continue;#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"launcher variables: SLURM_NTASKS that is not a number ignored (a run alone without a note)|host/comm.h|s#^    check_slurm_task_variables();\$#    (void)0;#|train|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
"mpirun: a command-line error printed by every rank|host/run.h|s#        if (comm.rank == 0) fprintf(stderr#        if (true) fprintf(stderr#|train|bash test/replicas/cpu_replicas.sh"
"mpirun: a command-line error ends the job by MPI_Abort (its banner; the other ranks killed, not exiting 2)|host/run.h|s#        if (comm.world > 1) comm.finalize();#        comm.abort_all(2);#|train|bash test/replicas/cpu_replicas.sh"
"multihost.sh: its arguments not checked (--help ran the whole suite)|test/replicas/multihost.sh|/^suite_arguments \"\$usage\" \"\$@\"\$/d|none|env GPU_TRAIN= bash test/hardening/bad_inputs.sh"
# ---- issue 48: what a GPU refuses, the CPU runtime refuses too (capture rules, host functions, surfaces)
"CPU runtime: a CUDA call inside a host function (cudaLaunchHostFunc, a graph's host node) is not refused|cpu_cuda/capture.h|s#    if (in_host_fn == 0) return cudaSuccess;#    if (true) return cudaSuccess;#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=host*functions:*"
"CPU runtime: cudaMalloc and the other unsafe calls allowed during a global-mode capture|cpu_cuda/capture.h|s#    if (forbidding.empty()) return cudaSuccess;#    if (true) return cudaSuccess;#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=stream*capture*modes:*"
"CPU runtime: another thread's ThreadLocal capture forbids this thread's cudaMalloc (only Global ones do)|cpu_cuda/capture.h|s#thread_capture_mode == cudaStreamCaptureModeGlobal \&\& c.mode == cudaStreamCaptureModeGlobal#thread_capture_mode == cudaStreamCaptureModeGlobal \&\& c.mode != cudaStreamCaptureModeRelaxed#|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=stream*capture*modes:*"
"CPU runtime: cudaStreamSynchronize on a capturing stream leaves the capture valid|cpu_cuda/capture.h|/^    invalidate_capture_of(stream);\$/d|test/cpu_runtime/kernel_features|./test/cpu_runtime/kernel_features -tc=cudaStreamSynchronize:*"
"CPU runtime: a surface access at an x byte offset not a multiple of the element size is carried out|cpu_cuda/textures.h|s#    if (x % (long)bytes == 0) return;#    return;#|test/cpu_runtime/samples|./test/cpu_runtime/samples -tc=surfaces:*"
"CPU runtime: cublasDgemmBatched computes the first product for every batch|cpu_cuda/cublas_cpu.h|s#handle, transa, transb, m, n, k, alpha, Aarray\[i\], lda, Barray\[i\], ldb, beta, Carray\[i\], ldc);#handle, transa, transb, m, n, k, alpha, Aarray[0], lda, Barray[0], ldb, beta, Carray[i], ldc);#|test/cpu_runtime/samples|./test/cpu_runtime/samples -tc=cuBLAS:*"
"CPU runtime: WMMA m16n16k8 tf32 products take the float inputs unrounded|cpu_cuda/wmma.h|s#    auto input = \[\](auto v) { return tf32 ? to_tf32(to_float(v)) : to_float(v); };#    auto input = [](auto v) { return to_float(v); };#|test/cpu_runtime/wmma|./test/cpu_runtime/wmma -tc=*tf32*"
"CPU runtime: a block larger than its block_tile_memory<MaxBlockSize> is not refused|cpu_cuda/cooperative_groups.h|s#    if (threads > MaxBlockSize)#    if (false)#|test/cpu_runtime/samples|./test/cpu_runtime/samples -tc=*block_tile_memory*"
"CPU runtime: cudaGetErrorName does not know cudaErrorNvlinkUncorrectable (a toolkit enumerator)|cpu_cuda/runtime.h|/{220, \"cudaErrorNvlinkUncorrectable\"/d|test/cpu_runtime/execution|./test/cpu_runtime/execution -tc=*every*enumerator*"
# ---- the CPU trainer's products (host/gemm.h) and make bench's breakdown (issue 49)
"gemm: an edge tile's last column not written back|host/gemm.h|s#for (int j = 0; j < cols; j++) c\[i \* ldc + j\] = tile\[i \* NR + j\];#for (int j = 0; j + 1 < cols; j++) c[i * ldc + j] = tile[i * NR + j];#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=matmul*forward*and*backward*"
"gemm: a stretch of depth starts from 0, not from the stretch before|host/gemm.h|s#pc > 0;  // later depth blocks add to the first one#pc > k0;#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=deep*matmul*"
"gemm: the 16×16 transpose interleaves 64 bits where it should 32|host/gemm.h|s#const ShuffleMask lo32 = {0, 16, 1, 17,#const ShuffleMask lo32 = {0, 1, 16, 17,#|test/cpu_trainer/trainer|./test/cpu_trainer/trainer -tc=large*matmul*"
"make bench: ./train run without TRAIN_PHASE_TIMES (no breakdown)|scripts/bench_cpu.sh|s#TRAIN_PHASE_TIMES=1 ./train#./train#|none|bash test/tools/bench_cpu.sh"
"phase times: the products not timed|train.cpp|s#    PhaseScope timed(PHASE_PRODUCTS);#    (void)0;#|train|bash test/tools/bench_cpu.sh"
)

# The programs make test builds: what "auto" chooses from.
read -r -a programs <<<"$(make -s --no-print-directory print-test-programs 2>/dev/null)"

# used_programs SUITE: the programs of make test that SUITE runs (see "auto" above)
used_programs() {
    local suite=$1 text p script
    text=$suite
    for script in $suite; do [[ $script == *.sh && -f $script ]] && text+=$'\n'"$(cat "$script")"; done
    local -a named=()
    for p in "${programs[@]}"; do grep -qw -- "$p" <<<"$text" && named+=("$p"); done
    # and what those run: the order-only prerequisites of their rules (after the "|"), and
    # the programs a test's source starts ("./train" in test/cpu_trainer/trainer.cpp)
    local -a more=()
    for p in "${named[@]}"; do
        more+=($(grep -h "^$p[ :]" Makefile cpu.mk gpu.mk 2>/dev/null | grep '|' | sed 's/.*|//'))
        local stem=${p%_fp32} src
        for src in "$p.cpp" "$p.cu" "${stem%_cpu}.cpp" "${stem%_cpu}.cu"; do
            [ -f "$src" ] && more+=($(grep -oE '"\./[A-Za-z0-9_/]+' "$src" | sed 's#^"\./##' | sort -u))
        done
    done
    for p in "${more[@]}"; do
        [[ " ${programs[*]} " == *" $p "* && " ${named[*]} " != *" $p "* ]] && named+=("$p")
    done
    echo "${named[*]}"
}

# targets_of ENTRY: the TARGETS column, or what "auto" derives
targets_of() {
    local name file expr targets suite
    IFS='|' read -r name file expr targets suite <<<"$1"
    if [ "$targets" = none ]; then return; fi  # a script: nothing to build
    if [ "$targets" = auto ] || [ -z "$targets" ]; then used_programs "$suite"; else echo "$targets"; fi
}

# selected INDEX NAME [WORDS...]: is the bug asked for (all when none named; and in PART)?
selected() {
    local index=$1 name=$2 w; shift 2
    if [ -n "$PART" ] && [ $((index % ${PART#*/})) -ne "${PART%/*}" ]; then return 1; fi
    [ $# -eq 0 ] && return 0
    for w in "$@"; do [[ $name == *"$w"* ]] && return 0; done
    return 1
}

for entry in "${mutations[@]}"; do  # five columns: a | inside one would shift the rest
    bars=${entry//[^|]/}
    [ ${#bars} -eq 4 ] || { echo "test/mutations.sh: ${#bars} '|' in a table line, not 4: $entry"; exit 1; }
done
chosen=()
for i in "${!mutations[@]}"; do
    IFS='|' read -r name _ <<<"${mutations[$i]}"
    selected "$i" "$name" "$@" && chosen+=("$i")
done
[ -n "$PART" ] && echo "mutations: part $PART of the table: ${#chosen[@]} of ${#mutations[@]} bugs"

# ---- the suites without any bug: everything they need built once, then each must pass, once
declare -A baseline=() suite_id=()
all_targets=()
for i in "${chosen[@]}"; do
    IFS='|' read -r name file expr targets suite <<<"${mutations[$i]}"
    all_targets+=($(targets_of "${mutations[$i]}"))
    [ -n "${suite_id[$suite]+x}" ] || suite_id[$suite]=${#suite_id[@]}
done
echo "==== building without a bug: $(printf '%s\n' "${all_targets[@]}" | sort -u | tr '\n' ' ')"
if [ ${#all_targets[@]} -gt 0 ] && ! make -j"$JOBS" $(printf '%s\n' "${all_targets[@]}" | sort -u) >build.log 2>&1; then
    tail -20 build.log; echo "the tree does not build: nothing tried"; exit 1
fi
# the suites side by side, JOBS at a time (each in this copy: they write to their own temporary directories)
for suite in "${!suite_id[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    id=${suite_id[$suite]}
    ( echo "==== without a bug: $suite"; timeout 900 $suite >"baseline.$id.log" 2>&1; echo $? >"baseline.$id.rc" ) &
done
wait
for suite in "${!suite_id[@]}"; do
    id=${suite_id[$suite]}
    if grep -q '^\[doctest\] test cases: *0 |' "baseline.$id.log"; then
        # a filter that matches nothing passes by running nothing (a SUITE is split at spaces:
        # write a test name's spaces as *)
        echo "==== RUNS NO TEST without a bug: $suite"; baseline[$suite]=fail
    elif [ "$(cat "baseline.$id.rc")" = 0 ]; then baseline[$suite]=pass
    else echo "==== FAILS without a bug: $suite"; tail -5 "baseline.$id.log"; baseline[$suite]=fail; fi
done

# try INDEX: plants bug INDEX in this copy, rebuilds, runs its suite; writes result.INDEX
try() {
    local i=$1 name file expr targets suite result start=$SECONDS
    IFS='|' read -r name file expr targets suite <<<"${mutations[$i]}"
    targets=$(targets_of "${mutations[$i]}")
    cp -p "$file" "$file.orig"
    if [ "${baseline[$suite]}" != pass ]; then
        result="NOT RUN (its suite fails, or runs no test, without the bug)"
    elif ! sed -i -e "$expr" "$file" || cmp -s "$file" "$file.orig"; then
        result="NOT APPLIED (the text is not in $file)"
    elif [ -n "$targets" ] && [ -z "$(make -n -W "$file" $targets 2>/dev/null | grep -E -- '-o ')" ]; then
        result="NOT APPLIED (no program the suite runs uses $file: $targets)"
    elif [ -n "$targets" ] && ! make -j"$make_jobs" $targets >"build.$i.log" 2>&1; then
        tail -5 "build.$i.log"; result="NOT APPLIED (does not build)"
    elif timeout 900 $suite >"suite.$i.log" 2>&1; then
        grep -E "FAIL|ERROR|passed" "suite.$i.log" | tail -3; result="survived"
    else
        grep -E "^FAIL|ERROR|test cases:|race|differ|error" "suite.$i.log" | head -3; result="caught"
    fi
    # the original back, newer than what the bug built, so that the next build redoes it
    mv "$file.orig" "$file" && touch "$file"
    echo "==== $name: $result ($((SECONDS - start)) s)"
    printf '%-60s %-9s %s\n' "$name" "$result" "$suite" >"$base/result.$i"
}

# ---- the bugs: worker w (its own copy of the tree) takes every JOBS-th of them
workers=$(( JOBS < ${#chosen[@]} ? JOBS : ${#chosen[@]} ))
make_jobs=$(( workers > 1 ? 1 : JOBS ))
for ((w = 1; w < workers; w++)); do cp -a "$base/0" "$base/$w"; done
for ((w = 0; w < workers; w++)); do
    (
        cd "$base/$w"
        for ((k = w; k < ${#chosen[@]}; k += workers)); do try "${chosen[$k]}"; done
    ) &
done
wait

echo
printf '%-60s %-9s %s\n' "bug" "result" "suite"
caught=0
for i in "${chosen[@]}"; do
    cat "$base/result.$i" 2>/dev/null || printf '%-60s %s\n' "(bug $i)" "NOT RUN (its worker stopped)"
    grep -q " caught " "$base/result.$i" 2>/dev/null && caught=$((caught + 1))
done
echo "$caught of ${#chosen[@]} caught"
[ "$caught" -eq "${#chosen[@]}" ]
exit
}
