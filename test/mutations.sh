#!/usr/bin/env bash
# Do the tests catch real bugs? Puts known bugs into a copy of this working tree, one at a
# time, rebuilds what the bug touches, runs the cheapest suites that must catch it, and prints
# a caught/survived table. The twelve of issue 25's audit, the clipping bug in the GPU
# trainer, a barrier of the fused LayerNorm backward, three in the tensor-core attention, one in
# the fused classifier and two in the backward's cuBLASLt epilogues. Not part of make test (each bug
# is a rebuild: some 15 to 20 minutes in all).
#
#   test/mutations.sh [NAME...]      all of them, or those whose name contains a NAME
#
# First every suite used runs on the copy as it is and must pass (else a "caught" would mean
# nothing). Exit status 0 when every bug was caught; 1 when one survived or could not be
# applied (its text is no longer in the source: update the table). Needs what make test
# needs, with the CUDA toolkit's headers for the CPU runtime (train_gpt_cpu, the GPU tests).
# A bug is "caught" when its suite exits non-zero; one that does not even build counts as
# not applied, since a compiler error is not a test.
# Each bug is a sed command on one file; the copy starts from the working tree as it is,
# built programs included (timestamps kept), so only what the bug touches is rebuilt.
set -u -f  # -f: the suites' -tc=NAME* patterns are doctest's, not the shell's
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
copy=$(mktemp -d /tmp/mutations.XXXXXX)
trap 'rm -rf "$copy"' EXIT
tar --exclude=./.git -cf - . | tar -xf - -C "$copy"
cd "$copy"
export OMP_WAIT_POLICY=passive

golden="./test/check_reference test/golden/model_tiny.bin test/golden/reference_tiny.bin"
# The table: NAME | FILE | SED COMMAND | MAKE TARGETS | SUITE (the command that must fail)
mutations=(
"no gradient zeroing|train.cpp|/^    std::fill(m.grads.begin(), m.grads.end(), 0.0f);\$/d|test/check_reference|$golden"
"loss scaled by 1/(B*T*A), not 1/(B*T*A*R)|train_gpt.cu|s#cross_entropy(B, T, true, 1.0f / (float)plan.global_tokens())#cross_entropy(B, T, true, 1.0f / (float)(plan.B * plan.T * plan.A))#|train_gpt_cpu|bash test/test_gpu_replicas.sh"
"all-reduce of the gradients skipped|train_gpt.cu|/^        comm.allreduce_sum(grads_buf.ptr, n);\$/d|train_gpt_cpu|bash test/test_gpu_replicas.sh"
"AdamW without bias correction|train.cpp|s#float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;#float inv_bc1 = 1.0f, inv_bc2 = 1.0f;#|test/test_cpu|./test/test_cpu -tc=AdamW*"
"clipping always scales by grad_clip/norm|train.cpp|s#(grad_clip > 0 \&\& norm > grad_clip) ?#(grad_clip > 0) ?#|test/test_cpu|./test/test_cpu -tc=clipping*"
"LayerNorm backward drops the xhat*mean(g*xhat) term|train.cpp|s#dx\[c\] = s \* (d\[c\] \* w\[c\] - g_mean - (x\[c\] - m) \* s \* gx_mean);#dx[c] = s * (d[c] * w[c] - g_mean);#|test/test_cpu|./test/test_cpu -tc=layernorm*"
"causal mask off by one (t sees t+1)|train.cpp|/^void attention_forward/,/^void attention_backward/ s#t2 <= t;#t2 <= t + (t + 1 < T);#g|test/test_cpu|./test/test_cpu -tc=attention*"
"weight decay on every tensor|host/checkpoint.h|s#^inline bool param_decays(int tensor) {\$#&\n    if (tensor >= 0) return true;#|test/test_cpu|./test/test_cpu -tc=AdamW*"
"every replica reads rank 0's data|host/data.h|s#((long long)a \* R_ + rank_) \* B_ \* T_#((long long)a * R_ + 0) * B_ * T_#|test/test_cpu|./test/test_cpu -tc=replicas*"
"m and v swapped in the state file|host/checkpoint.h|s#{m, n \* sizeof(float)}, {v, n \* sizeof(float)}#{v, n * sizeof(float)}, {m, n * sizeof(float)}#|train test/test_cpu|./test/test_cpu -tc=2N*"
"__syncthreads missing in LayerNorm's backward|gpu/layernorm.cuh|/lane_w\[threadIdx.y\]\[threadIdx.x\] = sw/{n;/__syncthreads/d}|dev/cuda/layernorm_cpu|env CPU_CUDA_RACECHECK=1 dev/cuda/layernorm_cpu --check"
"__syncthreads missing in fused LayerNorm backward|gpu/layernorm.cuh|/ln_sums\[c\] = 0.0f;/{n;/__syncthreads/d}|dev/cuda/layernorm_cpu|env CPU_CUDA_RACECHECK=1 dev/cuda/layernorm_cpu --check"
"validation loss from one replica only|host/eval.h|s#return comm.allreduce_sum(sum) / (double)v.tokens();#return sum * comm.world / (double)v.tokens();#|train_gpt_cpu|bash test/test_gpu_replicas.sh"
"clipping always scales, in the GPU trainer|train_gpt.cu|s#(grad_clip > 0 \&\& norm > grad_clip) ?#(grad_clip > 0) ?#|test/test_gpu_cpu_fp32|./test/test_gpu_cpu_fp32 -tc=clipping*"
"flash forward (tensor cores): output not rescaled when the row maximum grows|gpu/flash_attention_mma.cuh|/o\[n\]\[0\] \*= alpha\[0\]/d|test/test_flash_attention_cpu|./test/test_flash_attention_cpu -tc=fused*"
"flash forward (tensor cores): the diagonal tile shows row t key t+1|gpu/flash_attention_mma.cuh|s#if (acc_col(n, e) > warp_row + acc_row(e)) s\[n\]\[e\] = -INFINITY;#if (acc_col(n, e) > warp_row + acc_row(e) + 1) s[n][e] = -INFINITY;#|test/test_flash_attention_cpu|./test/test_flash_attention_cpu -tc=*causal*"
"flash dk/dv (tensor cores): key t+1 counted for query t|gpu/flash_attention_mma.cuh|s#return key > query #return key > query + 1 #|test/test_flash_attention_cpu|./test/test_flash_attention_cpu -tc=*causal*"
"fused classifier: the running sum not rescaled when the row maximum grows|gpu/crossentropy.cuh|s#(m == -INFINITY ? 0.0f : s \* expf(m - mm))#(m == -INFINITY ? 0.0f : s)#|test/test_gpu_cpu_fp32|./test/test_gpu_cpu_fp32 -tc=*classifier*"
"fused backward: the DGELU epilogue dropped (no gelu' on fcproj's input gradient)|gpu/matmul.cuh|s#if (gelu_in) di.epilogue = CUBLASLT_EPILOGUE_DGELU, di.aux#if (gelu_in) di.aux#|test/test_gpu_cpu_fp32|./test/test_gpu_cpu_fp32 -tc=matmul*"
"fused backward: BGRADB's bias gradient overwrites instead of adding|gpu/matmul.cuh|s#if (dbias) sum_partials_add(dbias, scratch, 1, OC);#if (dbias) CUDA_CHECK(cudaMemcpyAsync(dbias, scratch, OC * sizeof(float), cudaMemcpyDeviceToDevice, ctx.stream));#|test/test_gpu_cpu_fp32|./test/test_gpu_cpu_fp32 -tc=matmul*"
"gradient bucket started before its block's backward is done (train)|train.cpp|/if (sync) sync->block_done(l);/d; s#^        // d.dresidual holds ∂loss/∂(output of block l)\$#&\n        if (sync) sync->block_done(l);#|train|bash test/test_grad_sync.sh"
"gradient bucket started before its block's backward is done (train_gpt)|train_gpt.cu|/if (sync) sync->block_done(l);/d; s#^            // d.dresidual holds ∂loss/∂(output of block l)\$#&\n            if (sync) sync->block_done(l);#|train_gpt_cpu|bash test/test_grad_sync.sh"
)

# selected NAME: is the bug NAME among those asked for (all when none named)?
selected() {
    [ $# -eq 1 ] && return 0
    local name=$1 w; shift
    for w in "$@"; do [[ $name == *"$w"* ]] && return 0; done
    return 1
}

# ---- the suites without any bug: each must pass, once
declare -A baseline=()
for entry in "${mutations[@]}"; do
    IFS='|' read -r name file expr targets suite <<<"$entry"
    selected "$name" "$@" || continue
    [ -n "${baseline[$suite]+x}" ] && continue
    echo "==== without a bug: $suite"
    if make -j"$JOBS" $targets >build.log 2>&1 && timeout 900 $suite >suite.log 2>&1; then baseline[$suite]=pass
    else tail -5 build.log suite.log; baseline[$suite]=fail; fi
done

rows=() bad=0
for entry in "${mutations[@]}"; do
    IFS='|' read -r name file expr targets suite <<<"$entry"
    selected "$name" "$@" || continue
    echo "==== $name ($file)"
    cp -p "$file" "$file.orig"
    start=$SECONDS
    if [ "${baseline[$suite]}" != pass ]; then
        result="NOT RUN (its suite fails without the bug)"
    elif ! sed -i -e "$expr" "$file" || cmp -s "$file" "$file.orig"; then
        result="NOT APPLIED (the text is not in $file)"
    elif ! make -j"$JOBS" $targets >build.log 2>&1; then
        tail -5 build.log; result="NOT APPLIED (does not build)"
    elif timeout 900 $suite >suite.log 2>&1; then
        grep -E "FAIL|ERROR|passed" suite.log | tail -3; result="survived"
    else
        grep -E "^FAIL|ERROR|test cases:|race|differ|error" suite.log | head -3; result="caught"
    fi
    # the original back, newer than what the bug built, so that the next build redoes it
    mv "$file.orig" "$file" && touch "$file"
    echo "==== $result ($((SECONDS - start)) s)"
    [ "$result" = caught ] || bad=$((bad + 1))
    rows+=("$(printf '%-52s %-9s %s' "$name" "$result" "$suite")")
done

echo
printf '%-52s %-9s %s\n' "bug" "result" "suite"
for r in "${rows[@]}"; do echo "$r"; done
echo "$(( ${#rows[@]} - bad )) of ${#rows[@]} caught"
[ "$bad" -eq 0 ]
