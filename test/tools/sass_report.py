#!/usr/bin/env python3
"""Checks of dev/sass_report.py's parsing and arithmetic on SASS and ptxas output written
here by hand, so that every count below can be checked by reading the listing. Needs
neither nvcc nor the NVIDIA tools.

Plain Python, no test framework: every function decorated with @check runs, one line is
printed per check (PASS / FAIL and its name), the last line is "N passed, M failed", and
the exit status is 1 if anything failed.
"""
import contextlib
import importlib.util
import io
import os
import sys
import traceback

sys.dont_write_bytecode = True  # leave no __pycache__ in dev/
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("sass_report", os.path.join(ROOT, "dev", "sass_report.py"))
sr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sr)

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


# cuobjdump -sass style: hex addresses as branch targets, the encodings on their own lines.
# One loop, 0x60..0x130 (14 instructions), closed by the backward BRA at 0x130; in it:
# 3 HMMA (two m16n8k16 = 4096 FLOP each, one m16n8k8 = 2048), 2 LDSM, 1 generic LD, 1 FFMA,
# 1 FMUL and one integer-division sequence (I2F.RP, MUFU.RCP, F2I.TRUNC). Before the loop a
# second division sequence (I2F.U32.RP); at the end the trap BRA to itself, which is no loop.
FLAT_SASS = """
	code for sm_90
		Function : _Z9my_kernelPf
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                    /* 0x00000a00ff017b82 */
                                                                             /* 0x000fe20000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;
        /*0020*/                   I2F.U32.RP R2, R3 ;
        /*0030*/                   MUFU.RCP R2, R2 ;
        /*0040*/                   IADD3 R4, R2, 0xffffffe, RZ ;
        /*0050*/                   F2I.FTZ.U32.TRUNC.NTZ R5, R4 ;
        /*0060*/                   LDSM.16.M88.4 R8, [R6] ;
        /*0070*/                   LDSM.16.MT88.4 R12, [R6+0x800] ;
        /*0080*/                   LD.E R16, desc[UR4][R18.64] ;
        /*0090*/                   HMMA.16816.F32.BF16 R20, R8, R12, R20 ;
        /*00a0*/                   HMMA.16816.F32.BF16 R24, R8, R14, R24 ;
        /*00b0*/                   HMMA.1688.F32.TF32 R28, R8, R12, R28 ;
        /*00c0*/                   FFMA R30, R16, R16, R30 ;
        /*00d0*/                   FMUL R31, R30, 0.5 ;
        /*00e0*/                   I2F.RP R2, R7 ;
        /*00f0*/                   MUFU.RCP R2, R2 ;
        /*0100*/                   IADD3 R4, R2, 0xffffffe, RZ ;
        /*0110*/                   F2I.FTZ.U32.TRUNC.NTZ R5, R4 ;
        /*0120*/                   ISETP.NE.AND P0, PT, R5, RZ, PT ;
        /*0130*/               @P0 BRA 0x60 ;
        /*0140*/                   STG.E desc[UR4][R32.64], R20 ;
        /*0150*/                   EXIT ;
        /*0160*/                   BRA 0x160;
"""
FLAT_LOOP_FLOP = 2 * 4096 + 2048 + 64 + 32  # 3 HMMA, 1 FFMA (32 lanes x 2), 1 FMUL (32 lanes)

# nvdisasm -g style: labels as branch targets, source lines. An outer loop 0x10..0xb0 (11
# instructions, two back edges to .L_x_1: one loop up to the later one) holding two inner
# loops: A 0x20..0x40 (3 instructions, no HMMA) and B 0x60..0x70 (2, one HMMA), the hot one.
# The forward branch at 0x00 uses a label defined after it, and is no loop.
NESTED_SASS = """
//--------------------- .text._Z5outerv --------------------------
	.section	.text._Z5outerv,"ax",@progbits
.text._Z5outerv:
	//## File "{root}/gpu/k.cuh", line 10
        /*0000*/               @P5 BRA `(.L_x_4) ;
.L_x_1:
	//## File "{root}/gpu/k.cuh", line 11
        /*0010*/                   MOV R1, RZ ;
.L_x_2:
        /*0020*/                   FFMA R2, R3, R4, R2 ;
        /*0030*/                   FADD R5, R5, 1 ;
	//## File "{root}/gpu/k.cuh", line 12
        /*0040*/               @P0 BRA `(.L_x_2) ;
        /*0050*/                   LDS R6, [R7] ;
.L_x_3:
	//## File "/usr/local/cuda/include/crt/mma.hpp", line 300
        /*0060*/                   HMMA.16816.F32.BF16 R8, R12, R14, R8 ;
        /*0070*/               @P1 BRA `(.L_x_3) ;
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0090*/                   SHFL.BFLY PT, R9, R8, 0x1, 0x1f ;
	//## File "{root}/gpu/k.cuh", line 9
        /*00a0*/               @P2 BRA `(.L_x_1) ;
        /*00b0*/              @!P3 BRA `(.L_x_1) ;
        /*00c0*/                   EXIT ;
.L_x_4:
        /*00d0*/                   BRA `(.L_x_4);
""".replace("{root}", ROOT)

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z9my_kernelPf' for 'sm_90'
ptxas info    : Function properties for _Z9my_kernelPf
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 72 registers, used 1 barriers, 16384 bytes smem
ptxas info    : Compile time = 4.387 ms
ptxas info    : Function properties for $__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z5outerv' for 'sm_90'
ptxas info    : Function properties for _Z5outerv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, 400 bytes cmem[0]
"""

# cuobjdump -elf: _Z5outerv has __launch_bounds__(256)
ELF = """
.nv.info._Z5outerv
	<0x1>
	Attribute:	EIATTR_MAX_THREADS
	Format:	EIFMT_SVAL
	Value:	0x100 0x1 0x1 
.nv.info._Z9my_kernelPf
	<0x1>
	Attribute:	EIATTR_MAXREG_COUNT
	Format:	EIFMT_HVAL
	Value:	0xff
"""


def instrs(text, name):
    return sr.parse_sass(text)[name]


@check
def parses_cuobjdump_listing():
    code = instrs(FLAT_SASS, "_Z9my_kernelPf")
    assert len(code) == 23, len(code)  # 0x000..0x160, the encoding lines skipped
    assert code[19].opcode == "BRA" and code[19].target == 0x60, code[19]
    assert code[9].opcode == "HMMA.16816.F32.BF16" and code[9].base == "HMMA"


@check
def finds_the_loop_from_its_backward_branch():
    code = instrs(FLAT_SASS, "_Z9my_kernelPf")
    loops = sr.find_loops(code)
    assert loops == [(6, 19)], loops  # 0x60..0x130; the BRA to itself at 0x160 is no loop
    assert sr.hottest_loop(code, loops) == (6, 19)


@check
def counts_the_loop_mix():
    mix = sr.analyse_loops(instrs(FLAT_SASS, "_Z9my_kernelPf"))
    lp = mix["loop"]
    assert (lp["start"], lp["end"], mix["depth"]) == (0x60, 0x130, 1), lp
    expected = dict(instr=14, HMMA=3, LDSM=2, LD=1, ST=0, LDS=0, LDG=0, STG=0, IDIV=1, FFMA=1, FMUL=1, FADD=0,
                    MUFU=1, BAR=0, SHFL=0)
    for key, value in expected.items():
        assert lp[key] == value, (key, lp[key], value)
    assert lp["flop"] == FLAT_LOOP_FLOP == 10336
    assert lp["flop_per_instr"] == round(10336 / 14, 1) == 738.3, lp["flop_per_instr"]
    assert lp["mma_flop_per_instr"] == round(10240 / 14, 1) == 731.4


@check
def counts_the_whole_function():
    f = sr.analyse_loops(instrs(FLAT_SASS, "_Z9my_kernelPf"))["function"]
    assert (f["instr"], f["IDIV"], f["HMMA"], f["STG"], f["MUFU"]) == (23, 2, 3, 1, 2), f


@check
def hmma_flop_from_the_shape():
    assert sr.hmma_flop("HMMA.16816.F32.BF16") == 4096  # m16n8k16: 2·16·8·16
    assert sr.hmma_flop("HMMA.1688.F32.TF32") == 2048
    assert sr.hmma_flop("HMMA.16816.F16") == 4096


@check
def nested_loops_labels_and_source_lines():
    code = instrs(NESTED_SASS, "_Z5outerv")
    assert code[0].target == 0xd0, code[0]  # a label defined after its branch
    loops = sr.find_loops(code)
    assert loops == [(1, 11), (2, 4), (6, 7)], loops  # outer (two back edges), A, B
    mix = sr.analyse_loops(code)
    lp, outer = mix["loop"], mix["outer_loop"]
    assert (lp["start"], lp["end"], lp["instr"], lp["HMMA"]) == (0x60, 0x70, 2, 1), lp
    assert mix["depth"] == 2
    # the hot loop's back edge has no project line of its own (CUDA's header): the nearest before
    assert lp["source"] == "gpu/k.cuh:12", lp["source"]
    assert (outer["start"], outer["end"], outer["instr"], outer["source"]) == (0x10, 0xb0, 11, "gpu/k.cuh:9"), outer
    assert (outer["LDS"], outer["BAR"], outer["SHFL"], outer["FFMA"], outer["FADD"]) == (1, 1, 1, 1, 1), outer
    assert outer["flop_per_instr"] == round((4096 + 64 + 32) / 11, 1) == 381.1


@check
def the_hot_loop_is_where_the_hmma_are_not_the_innermost():
    # without B's back edge its HMMA sit in the outer loop's own body, around loop A (none)
    text = NESTED_SASS.replace("@P1 BRA `(.L_x_3) ;", "NOP ;")
    mix = sr.analyse_loops(instrs(text, "_Z5outerv"))
    assert (mix["loops"], mix["loop"]["start"], mix["loop"]["end"], mix["depth"]) == (2, 0x10, 0xb0, 1), mix


@check
def among_loops_of_equal_hmma_the_smaller():
    # two loops of one HMMA each: 0x00..0x10 (2 instructions) and 0x20..0x50 (4: a mask's
    # compare and select beside the same product); the lean one is the hot loop
    text = """
		Function : _Z4twov
        /*0000*/                   HMMA.16816.F32.BF16 R8, R12, R14, R8 ;
        /*0010*/               @P0 BRA 0x0 ;
        /*0020*/                   HMMA.16816.F32.BF16 R8, R12, R14, R8 ;
        /*0030*/                   FSETP.GT.AND P1, PT, R8, R9, PT ;
        /*0040*/                   FSEL R8, R8, -INF , !P1 ;
        /*0050*/               @P0 BRA 0x20 ;
        /*0060*/                   EXIT ;
"""
    code = instrs(text, "_Z4twov")
    assert sr.find_loops(code) == [(0, 1), (2, 5)], sr.find_loops(code)
    mix = sr.analyse_loops(code)
    assert (mix["loop"]["start"], mix["loop"]["end"], mix["loop"]["instr"]) == (0x0, 0x10, 2), mix["loop"]


@check
def largest_innermost_loop_without_hmma():
    text = NESTED_SASS.replace("HMMA.16816.F32.BF16 R8, R12, R14, R8", "IADD3 R8, R8, 1, RZ")
    mix = sr.analyse_loops(instrs(text, "_Z5outerv"))
    assert (mix["loop"]["start"], mix["loop"]["instr"]) == (0x20, 3), mix["loop"]  # A beats B (2)


@check
def ptxas_resources():
    res = sr.parse_ptxas(PTXAS)
    assert sorted(res) == ["_Z5outerv", "_Z9my_kernelPf"], sorted(res)  # not the slow-path subroutine
    assert res["_Z9my_kernelPf"] == dict(regs=72, spill_stores=8, spill_loads=12, stack=24, smem=16384), res
    assert res["_Z5outerv"] == dict(regs=32, spill_stores=0, spill_loads=0, stack=0, smem=0), res


@check
def launch_bounds_from_the_elf():
    assert sr.parse_max_threads(ELF) == {"_Z5outerv": 256}


@check
def blocks_per_sm_by_hand():
    # 72 regs: 2304 per warp (9 units of 256), 65536 // 2304 = 28 warps = 7 blocks of 4 warps;
    # shared memory 16384 + 20000 + 1024 reserved = 37408: 233472 // 37408 = 6 on sm_90,
    # 167936 // 37408 = 4 on sm_80; threads 2048 // 128 = 16
    assert sr.blocks_per_sm(90, 72, 128, 16384 + 20000) == (6, "smem")
    assert sr.blocks_per_sm(80, 72, 128, 16384 + 20000) == (4, "smem")
    assert sr.blocks_per_sm(90, 72, 128, 16384) == (7, "regs")  # 233472 // 17408 = 13
    # 33 regs round up to 40 per thread (1280 per warp): 65536 // 1280 = 51 warps, 6 blocks of 8
    assert sr.blocks_per_sm(90, 33, 256, 0) == (6, "regs")
    assert sr.blocks_per_sm(90, 32, 256, 0) == (8, "regs+threads")  # 64 warps both ways
    assert sr.blocks_per_sm(90, 16, 32, 0) == (32, "blocks")
    assert sr.blocks_per_sm(90, 32, 128, 228 << 10) == (0, "smem")  # over 227 KB per block
    assert sr.blocks_per_sm(75, 32, 128, 0) == (None, "arch?")


@check
def short_names():
    cases = {
        "void gpu::flash_forward_mma_kernel<64>(__nv_bfloat16*, float const*, int)": "flash_forward_mma_kernel<64>",
        "gpu::adamw_kernel(float*, int)": "adamw_kernel",
        "void gpu::k<gpu::Foo<int, 2>, 3>(int)": "k<gpu::Foo<int, 2>, 3>",
        "_ZN3gpu30flash_attention_forward_kernelEP13__nv_bfloat16PfPKS0_iii": "flash_attention_forward_kernel",
        "_Z9my_kernelPf": "my_kernel",
    }
    for given, want in cases.items():
        got = sr.short_name(given)
        assert got == want, (given, got)


@check
def threads_per_block_and_where_from():
    opts = sr.parse_args(["--threads", "gelu=64"])
    cases = {"flash_attention_forward_kernel": (128, "table"), "layernorm_forward_kernel": (256, "table"),
             "gelu_forward_kernel": (64, "option"), "flash_forward_mma_kernel<64>": (256, "default")}
    for name, want in cases.items():
        got = sr.threads_of(name, "_Z1x", {}, opts)
        assert got == want, (name, got, want)
    assert sr.threads_of("flash_forward_mma_kernel<64>", "_Z1x", {"_Z1x": 96}, opts) == (96, "launch bounds")


@check
def a_build_end_to_end_and_the_thresholds():
    opts = sr.parse_args(["--arch", "90", "--dynamic-smem", "my_kernel=20000", "--threads", "my_kernel=128",
                          "--min-flop-per-instr", "my_kernel=700", "--max-spills", "0",
                          "--min-blocks-per-sm", "outer=8", "--min-flop-per-instr", "renamed=1"])
    build = sr.report_build(90, "bf16", PTXAS, ELF, FLAT_SASS + NESTED_SASS, ["my_kernel"], opts)
    k = {k["name"]: k for k in build["kernels"]}
    mine, outer = k["my_kernel"], k["outer"]
    assert (mine["threads"], mine["threads_from"], mine["dynamic_smem"], mine["blocks_per_sm"],
            mine["limited_by"]) == (128, "option", 20000, 6, "smem"), mine
    assert mine["mix"]["loop"]["flop_per_instr"] == 738.3
    assert "mix" not in outer  # not selected
    assert (outer["threads"], outer["threads_from"], outer["blocks_per_sm"]) == (256, "launch bounds", 8), outer
    verdicts = sr.check_thresholds([build], opts)
    lines = [line for _, line in verdicts]
    assert [ok for ok, _ in verdicts] == [True, False, False, True], lines
    assert "my_kernel: 738.3 FLOP/instr (outer)" in lines[0], lines[0]
    assert "no kernel matches 'renamed'" in lines[1], lines[1]
    assert "my_kernel: 20 spill bytes" in lines[2], lines[2]
    table = sr.format_resources(build) + sr.format_mix(build)
    assert "my_kernel" in table and "738.3" in table, table


@check
def head_size_of_both_instantiations():
    for name, shown in [("flash_attention_forward_mma_kernel<64>", True), ("k<64, false>", True),
                        ("k<64, true>", True), ("k<128, true>", False), ("k<128>", False), ("adamw_kernel", True),
                        ("k<gpu::Foo<int, 2>, 3>", True)]:
        assert sr.at_head_size(name, 64) == shown, (name, shown)
    assert sr.at_head_size("k<128, true>", 0)
    assert sr.lookup(sr.DYNAMIC_SMEM_TABLE, "flash_attention_backward_dq_mma_kernel<64, true>", {}) == {"bf16": 55296}
    assert sr.lookup(sr.DYNAMIC_SMEM_TABLE, "flash_attention_backward_dq_mma_kernel<64, false>", {}) == {"bf16": 55296}
    # the five-product backward: (2·64 + 4·64) × 72 bf16 + 4·64 floats + 64 × 72 bf16 + 16 (its
    # bwd5_shared_bytes<64>()); hs = 128's is not in the table
    assert sr.lookup(sr.DYNAMIC_SMEM_TABLE, "flash_attention_backward_bwd5_mma_kernel<64>", {}) == {
        "bf16": (2 * 64 + 4 * 64) * 72 * 2 + 4 * 64 * 4 + 64 * 72 * 2 + 16}
    assert sr.lookup(sr.DYNAMIC_SMEM_TABLE, "flash_attention_backward_bwd5_mma_kernel<128>", {}) == {}


@check
def grouped_query_against_multi_head():
    def kernel(name, outer, outer_mma, hot=None):
        mix = {"loop": {"flop_per_instr": hot or outer, "mma_flop_per_instr": outer_mma},
               "function": {"flop_per_instr": 1.0, "mma_flop_per_instr": 1.0}}
        if hot:
            mix["outer_loop"] = {"flop_per_instr": outer, "mma_flop_per_instr": outer_mma}
        return {"name": name, "mix": mix}
    build = {"arch": 90, "precision": "bf16", "kernels": [
        kernel("dkdv<64, false>", 600.0, 590.0), kernel("dkdv<64, true>", 570.0, 560.5, hot=580.0),
        kernel("fwd<64, false>", 615.0, 605.0), kernel("fwd<64, true>", 500.0, 490.0),
        kernel("alone<64, true>", 100.0, 90.0), {"name": "dq<64, false>"}, {"name": "dq<64, true>"}]}
    pairs = [(g["name"], m["name"]) for g, m in sr.gqa_pairs(build)]
    assert pairs == [("dkdv<64, true>", "dkdv<64, false>"), ("fwd<64, true>", "fwd<64, false>")], pairs
    table = sr.format_gqa(build)
    assert "dkdv<64, true>" in table and "0.950" in table and "0.950" in table.splitlines()[2], table
    assert "0.813" in table.splitlines()[3], table  # 500 / 615
    opts = sr.parse_args(["--min-gqa-ratio", "0.9"])
    verdicts = sr.check_thresholds([build], opts)
    assert [ok for ok, _ in verdicts] == [True, False], verdicts
    assert "PASS min-gqa-ratio 0.9 sm_90 bf16 dkdv<64, true>: 0.950 of dkdv<64, false>'s" in verdicts[0][1], verdicts
    assert "FAIL min-gqa-ratio 0.9 sm_90 bf16 fwd<64, true>: 0.813" in verdicts[1][1], verdicts
    # the hot loop's figures when asked for
    opts = sr.parse_args(["--min-gqa-ratio", "0.9", "--flop-scope", "hot"])
    assert "0.967" in sr.check_thresholds([build], opts)[0][1]  # 580 / 600
    # a build with no pair fails the threshold instead of passing unnoticed
    lone = {"arch": 80, "precision": "bf16", "kernels": [kernel("fwd<64, false>", 615.0, 605.0)]}
    verdicts = sr.check_thresholds([lone], sr.parse_args(["--min-gqa-ratio", "0.9"]))
    assert [ok for ok, _ in verdicts] == [False] and "no <HS, true> kernel" in verdicts[0][1], verdicts
    assert sr.format_gqa(lone) == ""


# Shared-memory traffic: one loop 0x10..0xe0 (14 instructions) with 4 HMMA.16816 and one of
# each way of reaching shared memory, bytes per warp-instruction written beside each (by hand:
# ldmatrix 128 per 8×8 matrix, the others their width × 32 lanes); 2624 bytes in all, 656 per
# HMMA. A second function's loop has HMMA and no shared memory, a third's neither.
SMEM_SASS = """
	code for sm_90
		Function : _Z7smem_kv
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   LDSM.16.M88.4 R8, [R6] ;
        /*0020*/                   LDSM.16.MT88.2 R12, [R6+0x200] ;
        /*0030*/                   LDSM.16.M88 R14, [R6+0x400] ;
        /*0040*/                   LDS R16, [R7] ;
        /*0050*/                   LDS.64 R18, [R7+0x80] ;
        /*0060*/                   LDS.U16 R20, [R7+0x100] ;
        /*0070*/                   STS.128 [R7+0x200], R20 ;
        /*0080*/                   LDGSTS.E.BYPASS.LTC128B.128 [R9], desc[UR4][R10.64] ;
        /*0090*/                   LDGSTS.E.64 [R9+0x10], desc[UR4][R10.64+0x10] ;
        /*00a0*/                   HMMA.16816.F32.BF16 R24, R8, R12, R24 ;
        /*00b0*/                   HMMA.16816.F32.BF16 R28, R8, R13, R28 ;
        /*00c0*/                   HMMA.16816.F32.BF16 R32, R10, R12, R32 ;
        /*00d0*/                   HMMA.16816.F32.BF16 R36, R10, R13, R36 ;
        /*00e0*/               @P0 BRA 0x10 ;
        /*00f0*/                   EXIT ;
		Function : _Z8regs_onlyv
        /*0000*/                   HMMA.16816.F32.BF16 R24, R8, R12, R24 ;
        /*0010*/               @P0 BRA 0x0 ;
        /*0020*/                   EXIT ;
		Function : _Z6scalarv
        /*0000*/                   FFMA R2, R3, R4, R2 ;
        /*0010*/               @P0 BRA 0x0 ;
        /*0020*/                   EXIT ;
"""
SMEM_LOOP_BYTES = 512 + 256 + 128 + 128 + 256 + 64 + 512 + 512 + 256  # the loop's lines, in order


@check
def shared_bytes_of_each_instruction():
    code = instrs(SMEM_SASS, "_Z7smem_kv")
    got = [sr.smem_bytes(ins) for ins in code[1:10]]
    assert got == [512, 256, 128, 128, 256, 64, 512, 512, 256], got
    assert sr.smem_bytes(code[10]) == 0 and sr.smem_bytes(code[0]) == 0  # HMMA, S2R


@check
def shared_bytes_per_hmma_and_the_bound():
    mix = sr.analyse_loops(instrs(SMEM_SASS, "_Z7smem_kv"))
    lp = mix["loop"]
    assert (lp["start"], lp["end"], lp["instr"], lp["HMMA"]) == (0x10, 0xe0, 14, 4), lp
    assert lp["smem_bytes"] == SMEM_LOOP_BYTES == 2624, lp["smem_bytes"]
    assert lp["smem_bytes_per_hmma"] == 656.0, lp["smem_bytes_per_hmma"]  # 2624 / 4
    # sm_90: 1 HMMA.16816 per clock: 128 / 656 = 0.195; sm_80: 0.5 per clock: 128 / 328 = 0.390
    assert sr.smem_bound(90, lp["smem_bytes"], lp["mma_flop"]) == 0.195
    assert sr.smem_bound(80, lp["smem_bytes"], lp["mma_flop"]) == 0.390
    assert sr.smem_bound(86, lp["smem_bytes"], lp["mma_flop"]) is None  # no peak in the table
    # 64 bytes per HMMA would feed two HMMA per clock: capped at 1
    assert sr.smem_bound(90, 64 * 4, 4 * 4096) == 1.0
    regs = sr.analyse_loops(instrs(SMEM_SASS, "_Z8regs_onlyv"))["loop"]
    assert (regs["smem_bytes_per_hmma"], sr.smem_bound(90, 0, regs["mma_flop"])) == (0.0, 1.0), regs
    scalar = sr.analyse_loops(instrs(SMEM_SASS, "_Z6scalarv"))["loop"]
    assert scalar["smem_bytes_per_hmma"] is None and sr.smem_bound(90, 0, 0) is None, scalar


@check
def shared_bytes_in_the_table_and_the_threshold():
    ptxas = ("ptxas info    : Compiling entry function '_Z7smem_kv' for 'sm_90'\n"
             "ptxas info    : Used 40 registers\n"
             "ptxas info    : Compiling entry function '_Z6scalarv' for 'sm_90'\n"
             "ptxas info    : Used 8 registers\n")
    opts = sr.parse_args(["--arch", "90", "--max-smem-bytes-per-hmma", "smem_kv=656",
                          "--max-smem-bytes-per-hmma", "smem_kv=655.5", "--max-smem-bytes-per-hmma", "scalar=1"])
    build = sr.report_build(90, "bf16", ptxas, "", SMEM_SASS, ["smem_kv", "scalar"], opts)
    k = {k["name"]: k for k in build["kernels"]}
    assert k["smem_kv"]["mix"]["loop"]["smem_bound"] == 0.195, k["smem_kv"]["mix"]["loop"]
    table = sr.format_mix(build)
    row = next(line for line in table.splitlines() if line.startswith("hot loop") and "656.0" in line)
    assert row.split()[-2:] == ["656.0", "0.195"], row
    assert "smem B/HMMA  smem bound" in table, table
    verdicts = sr.check_thresholds([build], opts)
    assert [ok for ok, _ in verdicts] == [True, False, False], verdicts
    assert "PASS max-smem-bytes-per-hmma 656 sm_90 bf16 smem_kv: 656.0 shared bytes per HMMA" in verdicts[0][1]
    assert "FAIL max-smem-bytes-per-hmma 655.5 sm_90 bf16 smem_kv: 656.0" in verdicts[1][1], verdicts[1]
    assert "scalar: no loop with HMMA" in verdicts[2][1], verdicts[2]


@check
def no_nvcc_says_so_and_exits_2():
    saved = dict(os.environ)
    os.environ.update(PATH="/nonexistent", CUDA_HOME="/nonexistent")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            rc = sr.main(["--nvcc", "/nonexistent/nvcc"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert rc == 2, rc
    assert err.getvalue().count("\n") == 1 and "nvcc not found" in err.getvalue(), err.getvalue()



def usage_error(args):
    """(exit status, stderr) of sr.main(args), which must stop before compiling anything."""
    err = io.StringIO()
    compiled = []
    saved = sr.compile_cubin
    sr.compile_cubin = lambda *a, **k: compiled.append(a) or (_ for _ in ()).throw(AssertionError("compiled"))
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                rc = sr.main(args)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 1
    finally:
        sr.compile_cubin = saved
    assert not compiled, "compiled before refusing %s" % args
    return rc, err.getvalue()


@check
def bad_arguments_are_one_line_and_exit_2_before_any_compile():
    # a --nvcc that is not there is refused (not replaced by the nvcc on PATH); --json's folder
    # is checked before the compiles; a malformed NAME=N is a usage error (2), not 1
    cases = [(["--nvcc", "/nonexistent"], "--nvcc /nonexistent is not an executable file"),
             (["--json", "/missing/dir/x.json"], "--json /missing/dir/x.json is in /missing/dir, which is not a directory"),
             (["--json", os.path.dirname(os.path.abspath(__file__))], "is a directory"),
             (["--threads", "flash=abc"], "--threads wants NAME=NUMBER or NUMBER, not 'flash=abc'"),
             (["--max-spills", "x="], "--max-spills wants NAME=NUMBER or NUMBER, not 'x='")]
    for args, why in cases:
        rc, err = usage_error(args)
        assert rc == 2 and err.count("\n") == 1 and why in err, "%s: exit %s, stderr %r" % (args, rc, err)


def main():
    passed = failed = 0
    for fn in CHECKS:
        try:
            fn()
        except Exception as e:  # an AssertionError or anything the code under test raised
            failed += 1
            msg = str(e) or traceback.format_exc().strip().splitlines()[-1]
            print("FAIL %s: %s: %s" % (fn.__name__, type(e).__name__, msg))
        else:
            passed += 1
            print("PASS %s" % fn.__name__)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
