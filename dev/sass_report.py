#!/usr/bin/env python3
"""What the compiled GPU code says, without a GPU: per-kernel resources and the
instruction mix of the hottest loops (make sass; docs/attention.md, "Reading the
compiled code").

It compiles train_gpt.cu (or --source FILE) to a cubin per architecture with
`nvcc -cubin -arch=sm_XX -Xptxas -v`, disassembles it (cuobjdump -elf, nvdisasm),
and prints for every kernel:

  regs, spill bytes (stores/loads), stack frame, static and dynamic shared memory,
  threads per block, and the blocks per SM that registers, threads and shared memory
  allow (the occupancy limits of NVIDIA's "compute capabilities" table, SM_LIMITS);

and for the kernels selected by --kernel (substrings; default "attention") the
instruction mix of the hottest loop (the one whose own body holds the most HMMA), of the
outermost loop around it, and of the whole function. Counts are static: each instruction of the SASS counted once, however many
times it runs. FLOP/instr is FLOP per warp-instruction:

  (Σ HMMA × 2·m·n·k  +  FFMA × 64  +  (FADD + FMUL) × 32) / instructions

an HMMA.16816 (m16n8k16) being 4096 FLOP per warp, an FFMA 32 lanes × 2 FLOP. Beside it,
the loop's shared-memory traffic per HMMA and the bound that traffic puts on the tensor cores:

  smem B/HMMA = (Σ bytes each instruction moves through shared memory) / HMMA count:
                ldmatrix (LDSM) .x1/.x2/.x4 128/256/512 bytes per warp-instruction, LDS/STS
                their width × 32 lanes, LDGSTS (cp.async) the bytes it writes, 4/8/16 × 32
  smem bound  = min(1, SMEM_BYTES_PER_CLOCK / (bytes per HMMA-FLOP × MMA_FLOP_PER_CLOCK)):
                the fraction of the dense bf16 peak that shared memory could feed, with every
                HMMA.16816 at 1 per clock per SM on sm_90 (0.5 on sm_80) and 128 bytes of
                shared memory per clock per SM

  python3 dev/sass_report.py [--arch "80 90"] [--precision bf16|fp32|both]
        [--kernel SUBSTRING]... [--json FILE] [--check --min-flop-per-instr NAME=X
        --max-spills [NAME=]N --min-blocks-per-sm NAME=N --min-gqa-ratio R
        --max-smem-bytes-per-hmma NAME=X]

Exit status: 0; 1 when a threshold given falls short; 2 when nvcc, cuobjdump or
nvdisasm is missing (one line says which and how to get it).

Standard library only. cuobjdump and nvdisasm come with a full CUDA toolkit; where
they are missing (a toolkit of nvcc alone) the script installs NVIDIA's PyPI wheels
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm into .deps/nvidia-tools.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_DIR = os.path.join(ROOT, "build", "sass")
DEPS_DIR = os.path.join(ROOT, ".deps", "nvidia-tools")

# ---- the hardware's limits ------------------------------------------------------------------
# From the CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
# Specifications per Compute Capability" (shared memory in bytes). Per SM: the shared memory
# capacity (assumed all given to shared memory, the carveout the driver picks when a kernel
# needs it), 64K 32-bit registers, resident threads and blocks. Per block: at most 227 KB
# (sm_90) or 163 KB (sm_80) of shared memory, and the system reserves 1 KB more of each block's
# (cudaDevAttrReservedSharedMemoryPerBlock). Registers are allocated per warp in units of 256.
SM_LIMITS = {
    80: dict(smem_per_sm=164 << 10, smem_per_block=163 << 10, threads_per_sm=2048, blocks_per_sm=32),
    86: dict(smem_per_sm=100 << 10, smem_per_block=99 << 10, threads_per_sm=1536, blocks_per_sm=16),
    89: dict(smem_per_sm=100 << 10, smem_per_block=99 << 10, threads_per_sm=1536, blocks_per_sm=24),
    90: dict(smem_per_sm=228 << 10, smem_per_block=227 << 10, threads_per_sm=2048, blocks_per_sm=32),
}
REGS_PER_SM = 65536
# Shared memory's bandwidth: 32 banks of 32 bits per clock (CUDA C++ Programming Guide,
# "Shared Memory" of compute capabilities 5.x and later), 128 bytes per clock per SM.
SMEM_BYTES_PER_CLOCK = 128
# Dense bf16 tensor-core FLOP per clock per SM, float32 sums: sm_80 (A100 SXM): 312 TFLOP/s =
# 108 SMs × 2048 × 1.41 GHz (NVIDIA A100 Tensor Core GPU Architecture whitepaper); sm_90 (H100
# SXM5): 989.4 TFLOP/s = 132 SMs × 4096 × 1.83 GHz (NVIDIA H100 Tensor Core GPU Architecture
# whitepaper: 4 tensor cores per SM, 512 bf16 FMA per clock each). An HMMA.16816 is 4096 FLOP
# per warp: 1 per clock per SM on sm_90, 0.5 on sm_80. (sm_90's peak is wgmma's; mma.sync is
# not known to reach it, so the bound is against the most the SM could do.)
MMA_FLOP_PER_CLOCK = {80: 2048, 90: 4096}
REG_ALLOC_UNIT = 256  # registers per warp are allocated in units of this many
RESERVED_SMEM_PER_BLOCK = 1024

# ---- what the trainer launches (the compiled code does not say) ------------------------------
# Threads per block, by kernel-name substring (first match wins), where the kernel has no
# __launch_bounds__ (a bound in the cubin, EIATTR_MAX_THREADS, comes first). The figures are
# the launches in gpu/*.cuh; --threads NAME=N overrides.
THREADS_TABLE = [
    ("flash_attention_row_dots", 256),  # flash_attention.cuh, the tensor-core path's D = rowsum(dy ⊙ y)
    ("flash_attention", 128),       # FLASH_THREADS
    ("sum_doubles_kernel", 1024),   # adamw.cuh
    ("add_mean_loss_kernel", 1024),  # crossentropy.cuh
    ("crossentropy_three_pass_kernel", 512),  # CE_THREADS (fewer with a vocabulary under 512)
    ("crossentropy_fused_kernel", 1024),       # CE_FUSED_THREADS (its __launch_bounds__ too)
    # THREADS, and 32 × LANES of the column-sum kernels (layernorm_param_partial, bias_grad_partial)
    (("adamw", "sum_squares", "sum_partials", "qkv_kernel", "heads_to_rows", "rows_to_heads", "causal_softmax",
      "encoder_", "wte_", "wpe_", "layernorm_", "gelu_", "bias_grad", "residual_", "to_floatX",
      "rmsnorm_", "rope_", "swiglu_"), 256),  # rmsnorm.cuh, rope.cuh, swiglu.cuh (Llama): THREADS
    ("", 256),                      # a kernel the table does not know: a guess, marked '?'
]
# Dynamic shared memory (bytes) at GPT-2 124M's head size hs = 64, by kernel-name substring and
# precision: flash_forward_tiles() and flash_backward_tiles() of gpu/flash_attention.cuh, and the
# *_shared_bytes<64>() of gpu/flash_attention_mma.cuh (bf16 only), worked out by hand; the
# tensor-core kernels' two instantiations, <64, false> (multi-head) and <64, true> (grouped-query
# attention), take the same. Kernels not listed use none; --dynamic-smem NAME=BYTES overrides or adds.
DYNAMIC_SMEM_TABLE = [
    ("flash_attention_forward_mma_kernel<64,", {"bf16": 46080}),        # 5 tiles of 64 × 72 bf16
    ("flash_attention_forward_wide_kernel<64,", {"bf16": 36864}),       # 4 tiles of 64 × 72 bf16 (q in one pair)
    ("flash_attention_backward_dkdv_mma_kernel<64,", {"bf16": 56320}),  # 6 such tiles, 256 floats
    ("flash_attention_backward_dq_mma_kernel<64,", {"bf16": 55296}),    # 6 such tiles
    # gpu/flash_attention_bwd5.cuh's bwd5_shared_bytes<64>(): 6 such tiles, 256 floats, the 64 × 72
    # dSᵀ tile, 16 bytes for the ticket
    ("flash_attention_backward_bwd5_mma_kernel<64>", {"bf16": 65552}),
    ("flash_attention_forward_kernel", {"bf16": 30080, "fp32": 44416}),
    ("flash_attention_backward_dq_kernel", {"bf16": 41728, "fp32": 62208}),
    ("flash_attention_backward_dkdv_kernel", {"bf16": 50432, "fp32": 70912}),
]

# ---- instruction classes -----------------------------------------------------------------------
# The columns of the instruction mix: name -> base opcodes counted under it (the mnemonic up to
# its first dot). LD/ST are the generic-address loads and stores: shared memory reached
# through a generic pointer, which cost an address-space check that LDS/STS do not.
MIX_COLUMNS = [
    ("HMMA", {"HMMA"}), ("LDSM", {"LDSM"}), ("LDS", {"LDS"}), ("STS", {"STS"}), ("LD", {"LD"}),
    ("ST", {"ST"}), ("LDG", {"LDG"}), ("STG", {"STG"}), ("LDGSTS", {"LDGSTS"}), ("LOCAL", {"LDL", "STL"}),
    ("SHFL", {"SHFL"}), ("BAR", {"BAR"}), ("MUFU", {"MUFU"}), ("FFMA", {"FFMA"}), ("FMUL", {"FMUL"}),
    ("FADD", {"FADD"}),
]
# Bytes one warp-instruction moves through shared memory: ldmatrix/stmatrix by their count of
# 8×8 matrices (.x1 128, .2 256, .4 512), LDS/STS/LDGSTS by their width (4 bytes without a
# width modifier) × 32 lanes.
SMEM_MATRIX_OPS = {"LDSM", "STSM"}
SMEM_LANE_OPS = {"LDS", "STS", "LDGSTS"}
SMEM_WIDTHS = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "32": 4, "64": 8, "128": 16}


def smem_bytes(ins):
    """Bytes of shared memory one warp-instruction reads or writes (0 for the others)."""
    parts = ins.opcode.split(".")
    if ins.base in SMEM_MATRIX_OPS:
        return 128 * (int(parts[-1]) if parts[-1] in ("2", "4") else 1)
    if ins.base in SMEM_LANE_OPS:
        width = next((SMEM_WIDTHS[p] for p in parts[1:] if p in SMEM_WIDTHS), 4)
        return width * WARP
    return 0


def smem_bound(arch, smem, mma_flop):
    """The fraction of the dense bf16 peak that shared memory can feed a loop that moves smem
    bytes per mma_flop tensor-core FLOP: min(1, bytes per clock / (bytes per FLOP × FLOP per
    clock)); None without HMMA or for an architecture not in MMA_FLOP_PER_CLOCK."""
    peak = MMA_FLOP_PER_CLOCK.get(arch)
    if not mma_flop or peak is None:
        return None
    return 1.0 if smem == 0 else round(min(1.0, SMEM_BYTES_PER_CLOCK * mma_flop / (smem * peak)), 3)


# m, n, k of the HMMA shapes in the mnemonic (HMMA.16816.F32.BF16 is m16n8k16)
HMMA_SHAPES = {"16816": (16, 8, 16), "1688": (16, 8, 8), "1684": (16, 8, 4), "884": (8, 8, 4)}
WARP = 32


class Instr:
    """One SASS instruction: address, opcode with modifiers, operands, branch target, source line."""

    def __init__(self, addr, opcode, operands, target=None, line=None):
        self.addr, self.opcode, self.operands, self.target, self.line = addr, opcode, operands, target, line

    @property
    def base(self):
        return self.opcode.split(".")[0]

    def __repr__(self):
        return "Instr(0x%x %s %s)" % (self.addr, self.opcode, self.operands)


# ---- parsing -------------------------------------------------------------------------------------
def parse_ptxas(text):
    """ptxas -v output -> {mangled name: {regs, spill_stores, spill_loads, stack, smem}} of entry
    functions (kernels)."""
    kernels, props, current = {}, {}, None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
            kernels[current] = dict(regs=0, spill_stores=0, spill_loads=0, stack=0, smem=0)
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m and i + 1 < len(lines):
            nxt = lines[i + 1]
            props[m.group(1)] = {key: _bytes(nxt, pattern) for key, pattern in
                                 [("stack", "stack frame"), ("spill_stores", "spill stores"),
                                  ("spill_loads", "spill loads")]}
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            kernels[current]["regs"] = int(m.group(1))
            kernels[current]["smem"] = _bytes(line, "smem")
    for name, k in kernels.items():
        k.update(props.get(name, {}))
    return kernels


def _bytes(line, what):
    m = re.search(r"(\d+) bytes %s" % what, line)
    return int(m.group(1)) if m else 0


def parse_max_threads(elf_text):
    """cuobjdump -elf output -> {mangled name: threads per block} of kernels that carry a bound
    (__launch_bounds__ gives EIATTR_MAX_THREADS, .reqntid EIATTR_REQNTID)."""
    found, current = {}, None
    lines = elf_text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\.nv\.info\.(\S+)", line.strip())
        if m:
            current = m.group(1)
            continue
        if current and re.search(r"EIATTR_(MAX_THREADS|REQNTID)\b", line):
            for nxt in lines[i + 1:i + 4]:  # "Format:" then "Value: 0x100 0x1 0x1"
                v = re.search(r"Value:\s*((?:0x[0-9a-fA-F]+\s*)+)", nxt)
                if v:
                    dims = [int(x, 16) for x in v.group(1).split()]
                    total = 1
                    for d in dims:
                        total *= d
                    found[current] = total
                    break
    return found


INSTR_RE = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
FUNC_RE = re.compile(r"^\s*(?:Function : (\S+)|\.text\.(\S+):)\s*$")
LABEL_RE = re.compile(r"^\s*(\.L\w+):")
LINE_RE = re.compile(r'//## File "([^"]+)", line (\d+)')


def parse_sass(text):
    """SASS listing (cuobjdump -sass, or nvdisasm with or without -g) -> {function: [Instr]}.

    Branch targets are resolved to addresses: cuobjdump writes them as hex (BRA 0x520),
    nvdisasm as labels (BRA `(.L_x_3)), whose address is the next instruction's."""
    functions, current = {}, None
    pending_labels, labels, line_info = [], {}, None
    for raw in text.splitlines():
        m = FUNC_RE.match(raw)
        if m:
            current = m.group(1) or m.group(2)
            functions[current] = []
            pending_labels, labels[current], line_info = [], {}, None
            continue
        if current is None:
            continue
        m = LINE_RE.search(raw)
        if m:
            line_info = (m.group(1), int(m.group(2)))
            continue
        m = LABEL_RE.match(raw)
        if m:
            pending_labels.append(m.group(1))
            continue
        m = INSTR_RE.match(raw)
        if not m:
            continue
        addr, opcode, operands = int(m.group(1), 16), m.group(2), m.group(3).strip()
        for label in pending_labels:
            labels[current][label] = addr
        pending_labels = []
        target = None
        if opcode.split(".")[0] == "BRA":
            t = re.search(r"\(?(\.L\w+)\)?|0x([0-9a-fA-F]+)\s*$", operands)
            if t:
                target = t.group(1) or int(t.group(2), 16)
        functions[current].append(Instr(addr, opcode, operands, target, line_info))
    for name, instrs in functions.items():
        for ins in instrs:  # labels may be defined after the branch that uses them
            if isinstance(ins.target, str):
                ins.target = labels[name].get(ins.target)
    return functions


# ---- analysis ------------------------------------------------------------------------------------
def find_loops(instrs):
    """Loops as (first index, last index) into instrs, from the backward branches: a BRA to an
    earlier address closes a loop whose body runs from the target to the branch. Several
    back edges to one target are one loop (to the last of them). A branch to itself (the trap
    at a function's end) is no loop."""
    index = {ins.addr: i for i, ins in enumerate(instrs)}
    ends = {}
    for i, ins in enumerate(instrs):
        if ins.target is not None and ins.target < ins.addr and ins.target in index:
            start = index[ins.target]
            ends[start] = max(ends.get(start, i), i)
    return sorted(ends.items())


def contains(outer, inner):
    return outer != inner and outer[0] <= inner[0] and inner[1] <= outer[1]


def own_instructions(loop, loops):
    """Indices of a loop's own body: in it, but in none of the loops nested in it."""
    inner = set()
    for other in loops:
        if contains(loop, other):
            inner.update(range(other[0], other[1] + 1))
    return [i for i in range(loop[0], loop[1] + 1) if i not in inner]


def hottest_loop(instrs, loops):
    """The loop whose own body (inner loops left out) holds the most HMMA: where the tensor
    cores' work sits in the nest. Among equals the smaller own body: the steady state rather
    than a copy of it with more work beside the same products (the wide attention forward's
    loop over the diagonal's masked tiles after its loop over the others). Without HMMA in any
    loop, the largest innermost loop. None when there is no loop."""
    if not loops:
        return None

    def own_hmma(lp):
        own = own_instructions(lp, loops)
        return (sum(1 for i in own if instrs[i].base == "HMMA"), -len(own), -lp[0])
    best = max(loops, key=own_hmma)
    if own_hmma(best)[0]:
        return best
    innermost = [lp for lp in loops if not any(contains(lp, other) for other in loops)]
    return max(innermost, key=lambda lp: (lp[1] - lp[0], -lp[0]))


def outermost_around(loop, loops):
    """The largest loop that holds `loop` (the loop itself if none does), and the nesting depth."""
    around = [lp for lp in loops if contains(lp, loop)]
    if not around:
        return loop, 1
    return max(around, key=lambda lp: lp[1] - lp[0]), len(around) + 1


def division_sequences(instrs):
    """Start indices of the sequences nvcc emits for an integer / or % by a non-constant: the
    divisor to float rounding up (I2F.RP, or I2F.U32.RP), its reciprocal (MUFU.RCP), back to
    an integer (F2I...TRUNC), then a correction in integer arithmetic."""
    starts = []
    for i, ins in enumerate(instrs):
        if ins.base != "I2F" or ".RP" not in ins.opcode:
            continue
        window = instrs[i + 1:i + 8]
        rcp = next((j for j, w in enumerate(window) if w.opcode.startswith("MUFU.RCP")), None)
        if rcp is not None and any(w.base == "F2I" and "TRUNC" in w.opcode for w in window[rcp + 1:]):
            starts.append(i)
    return starts


def hmma_flop(opcode):
    """FLOP of one HMMA warp-instruction, 2·m·n·k, from its shape (HMMA.16816... -> 4096)."""
    for part in opcode.split(".")[1:]:
        if part in HMMA_SHAPES:
            m, n, k = HMMA_SHAPES[part]
            return 2 * m * n * k
    return 0


def instruction_mix(instrs, division_starts=None):
    """Counts of the MIX_COLUMNS, integer-division sequences (IDIV), FLOP per
    warp-instruction (all, and the tensor cores' alone) over a list of instructions."""
    mix = {name: 0 for name, _ in MIX_COLUMNS}
    mma_flop = simt_flop = smem = 0
    for ins in instrs:
        smem += smem_bytes(ins)
        for name, bases in MIX_COLUMNS:
            if ins.base in bases:
                mix[name] += 1
        if ins.base == "HMMA":
            mma_flop += hmma_flop(ins.opcode)
        elif ins.base == "FFMA":
            simt_flop += 2 * WARP
        elif ins.base in ("FADD", "FMUL"):
            simt_flop += WARP
    if division_starts is None:
        division_starts = division_sequences(instrs)
    mix["IDIV"] = len(division_starts)
    n = len(instrs)
    mix["instr"] = n
    mix["flop"] = mma_flop + simt_flop
    mix["flop_per_instr"] = round((mma_flop + simt_flop) / n, 1) if n else 0.0
    mix["mma_flop_per_instr"] = round(mma_flop / n, 1) if n else 0.0
    mix["mma_flop"], mix["smem_bytes"] = mma_flop, smem
    mix["smem_bytes_per_hmma"] = round(smem / mix["HMMA"], 1) if mix["HMMA"] else None
    return mix


# Source files of the toolkit and the system (WMMA's and CUDA's math headers, inlined into the
# kernels): a loop's source line is looked for outside them. main() adds nvcc's own directory.
TOOLKIT_DIRS = ["/usr/local/cuda", "/usr/include/", "/usr/lib/"]


def loop_line(instrs, back_edge):
    """'file:line' of the loop closed by instrs[back_edge]: the line of that branch, its for or
    while statement (needs -lineinfo and nvdisasm -g); '' without line information. Code
    inlined from a toolkit header is passed over for the nearest line of ours before it."""
    located = [ins.line for ins in reversed(instrs[:back_edge + 1]) if ins.line]
    if not located:
        return ""
    ours = [loc for loc in located if not any(loc[0].startswith(d) for d in TOOLKIT_DIRS)]
    path, line = (ours or located)[0]
    if path.startswith(ROOT + os.sep):
        path = os.path.relpath(path, ROOT)
    return "%s:%d" % (path, line)


def analyse_loops(instrs):
    """The hottest loop, the outermost loop around it and the whole function: a mix of each."""
    loops = find_loops(instrs)
    starts = division_sequences(instrs)

    def mix_of(lo, hi):
        return instruction_mix(instrs[lo:hi + 1], [s for s in starts if lo <= s <= hi])
    result = {"function": mix_of(0, len(instrs) - 1), "loops": len(loops)}
    hot = hottest_loop(instrs, loops)
    if hot:
        outer, depth = outermost_around(hot, loops)
        for name, lp in (("loop", hot), ("outer_loop", outer)):
            result[name] = mix_of(*lp)
            result[name].update(start=instrs[lp[0]].addr, end=instrs[lp[1]].addr,
                                source=loop_line(instrs, lp[1]))
        result["depth"] = depth
    return result


def blocks_per_sm(arch, regs, threads, smem_per_block):
    """Resident blocks per SM and what limits them ('regs', 'threads', 'blocks', 'smem', joined
    by + when several bind), or
    (0, why) when a block cannot run at all; (None, 'arch?') for an architecture not in
    SM_LIMITS."""
    lim = SM_LIMITS.get(arch)
    if lim is None:
        return None, "arch?"
    if smem_per_block > lim["smem_per_block"]:
        return 0, "smem"
    warps = -(-threads // WARP)
    regs_per_warp = -(-regs * WARP // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    if regs_per_warp * warps > REGS_PER_SM:
        return 0, "regs"
    limits = {
        "regs": REGS_PER_SM // regs_per_warp // warps if regs else lim["blocks_per_sm"],
        "threads": lim["threads_per_sm"] // (warps * WARP),
        "blocks": lim["blocks_per_sm"],
        "smem": lim["smem_per_sm"] // (smem_per_block + RESERVED_SMEM_PER_BLOCK),
    }
    fewest = min(limits.values())
    return fewest, "+".join(k for k in limits if limits[k] == fewest)  # every limit that binds


# ---- names ---------------------------------------------------------------------------------------
def demangle_all(names):
    """{mangled: demangled} with c++filt when there is one, else the mangled names themselves
    (short_name() still makes them readable)."""
    names = list(names)
    tool = shutil.which("c++filt")
    if tool and names:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
        if len(out) == len(names):
            return dict(zip(names, out))
    return {n: n for n in names}


def short_name(demangled):
    """'void gpu::flash_forward_mma_kernel<64>(__nv_bfloat16*, int)' -> 'flash_forward_mma_kernel<64>':
    no return type, namespace or parameter list; template arguments kept."""
    s = demangled.strip()
    if s.startswith("_Z"):  # not demangled (no c++filt): the last identifier of the nested name
        body, parts = s[3:] if s.startswith("_ZN") else s[2:], []
        while body[:1].isdigit():
            n = re.match(r"\d+", body).group()
            parts.append(body[len(n):len(n) + int(n)])
            body = body[len(n) + int(n):]
        return parts[-1] if parts else s
    if s.endswith(")"):  # drop the parameter list: the last balanced (...)
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    depth, last_space, last_colons = 0, -1, -1
    for i, ch in enumerate(s):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if depth == 0 and ch == " ":
            last_space = i
    s = s[last_space + 1:]
    depth = 0
    for i, ch in enumerate(s):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if depth == 0 and s.startswith("::", i):
            last_colons = i + 2
    return s[max(last_colons, 0):]


# ---- the tools -------------------------------------------------------------------------------------
def find_nvcc(given):
    for candidate in (given, shutil.which("nvcc"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def cuda_major(nvcc):
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def find_tool(name, nvcc):
    """cuobjdump or nvdisasm: PATH, next to nvcc, CUDA_HOME/bin, then .deps/nvidia-tools."""
    places = [shutil.which(name), os.path.join(os.path.dirname(nvcc), name),
              os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", name)]
    places += sorted(glob.glob(os.path.join(DEPS_DIR, "nvidia", "*", "bin", name)))
    places += sorted(glob.glob(os.path.join(DEPS_DIR, "nvidia", "cuda_*", "bin", name)))
    return next((p for p in places if p and os.path.isfile(p) and os.access(p, os.X_OK)), None)


def ensure_tools(nvcc):
    """(cuobjdump, nvdisasm), installing the NVIDIA wheels of nvcc's major version into
    .deps/nvidia-tools when they are missing; exits 2 with one line if that fails. (A wheel of
    the same major version reads nvcc's cubins; a newer minor version is fine, PyPI has no
    13.0 wheels.)"""
    tools = [find_tool("cuobjdump", nvcc), find_tool("nvdisasm", nvcc)]
    if all(tools):
        return tools
    major = cuda_major(nvcc)[0]
    wheels = ["nvidia-cuda-cuobjdump==%d.*" % major, "nvidia-cuda-nvdisasm==%d.*" % major]
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--target", DEPS_DIR] + wheels
    print("sass_report: cuobjdump/nvdisasm not found; installing them: %s" % " ".join(cmd[2:]), file=sys.stderr)
    done = subprocess.run(cmd, capture_output=True, text=True)
    tools = [find_tool("cuobjdump", nvcc), find_tool("nvdisasm", nvcc)]
    if done.returncode != 0 or not all(tools):
        print("sass_report: cuobjdump and nvdisasm are missing and could not be installed; install the "
              "wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm: python3 -m pip install --target "
              "%s '%s' '%s'" % (os.path.relpath(DEPS_DIR, os.getcwd()), wheels[0], wheels[1]), file=sys.stderr)
        sys.exit(2)
    return tools


def compile_cubin(nvcc, source, arch, precision, includes, extra_flags):
    """(cubin path, ptxas -v text), rebuilt only when the source, a header under gpu/ or host/,
    or the command changed."""
    os.makedirs(BUILD_DIR, exist_ok=True)
    stem = os.path.join(BUILD_DIR, "%s-%s-sm_%d" % (os.path.splitext(os.path.basename(source))[0], precision, arch))
    cubin, log, cmd_file = stem + ".cubin", stem + ".ptxas.txt", stem + ".cmd"
    cmd = [nvcc, "-cubin", "-arch=sm_%d" % arch, "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v"]
    cmd += (["-DTRAIN_BF16"] if precision == "bf16" else []) + ["-I" + d for d in includes] + extra_flags
    cmd += ["-o", cubin, source]
    deps = [source] + glob.glob(os.path.join(ROOT, "gpu", "*")) + glob.glob(os.path.join(ROOT, "host", "*"))
    fresh = (os.path.exists(cubin) and os.path.exists(log) and os.path.exists(cmd_file)
             and open(cmd_file).read() == " ".join(cmd)
             and os.path.getmtime(cubin) >= max(os.path.getmtime(d) for d in deps))
    if not fresh:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit("sass_report: nvcc failed for sm_%d %s: %s" % (arch, precision, " ".join(cmd)))
        with open(log, "w") as f:
            f.write(done.stdout + done.stderr)
        with open(cmd_file, "w") as f:
            f.write(" ".join(cmd))
    return cubin, open(log).read()


def run_tool(args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit("sass_report: %s failed: %s" % (" ".join(args), done.stderr.strip()))
    return done.stdout


# ---- one build, measured -------------------------------------------------------------------------
def matches(key, name):
    """A table key (a substring, or a tuple of them) names this kernel."""
    return any(k in name for k in key) if isinstance(key, tuple) else key in name


def lookup(table, name, default=None):
    return next((value for key, value in table if matches(key, name)), default)


def overrides(pairs, what):
    """['NAME=VALUE', ...] -> [(NAME, number)], in the order given."""
    out = []
    for pair in pairs or []:
        name, sep, value = pair.rpartition("=")
        if not sep:
            name, value = "", pair
        try:
            out.append((name, float(value) if "." in value else int(value)))
        except ValueError:  # a usage error: one line, exit 2
            print("sass_report: %s wants NAME=NUMBER or NUMBER, not %r" % (what, pair), file=sys.stderr)
            sys.exit(2)
    return out


def threads_of(name, mangled, bounds, opts):
    """(threads per block, where from: 'option', 'launch bounds', 'table', or 'default' for a
    kernel the table does not name, whose figure is a guess)."""
    given = lookup(opts.threads, name)
    if given:
        return given, "option"
    if mangled in bounds:
        return bounds[mangled], "launch bounds"
    key, threads = next((key, value) for key, value in THREADS_TABLE if matches(key, name))
    return threads, "table" if key else "default"


def at_head_size(name, head_size):
    """Is this kernel shown: not a template on the head size (its first template argument, as in
    name<64> or name<64, true>), or at head_size (0: all)?"""
    m = re.search(r"<(\d+)(?:, [^<>]*)?>$", name)
    return head_size == 0 or not m or int(m.group(1)) == head_size


# The tensor-core attention kernels come in two instantiations per head size: name<HS, false>
# for multi-head attention (KVH = NH, GPT-2) and name<HS, true> for grouped-query attention
# (KVH < NH, Llama); a kernel without the second is compared with nothing.
GQA_NAME = re.compile(r"^(.*)<(\d+), true>$")


def gqa_pairs(build):
    """[(gqa kernel, its multi-head sibling)] of one build, the kernels whose loops were analysed."""
    by_name = {k["name"]: k for k in build["kernels"]}
    pairs = []
    for k in build["kernels"]:
        m = GQA_NAME.match(k["name"])
        mha = by_name.get("%s<%s, false>" % (m.group(1), m.group(2))) if m else None
        if mha and k.get("mix") and mha.get("mix"):
            pairs.append((k, mha))
    return pairs


def report_build(arch, precision, ptxas_text, elf_text, sass_text, selected, opts):
    """Everything measured of one (arch, precision) build, as a dict (what --json writes)."""
    resources = parse_ptxas(ptxas_text)
    bounds = parse_max_threads(elf_text)
    functions = parse_sass(sass_text)
    names = demangle_all(resources)
    kernels = []
    for mangled, res in resources.items():
        name = short_name(names[mangled])
        if not at_head_size(name, opts.head_size):
            continue
        threads, threads_from = threads_of(name, mangled, bounds, opts)
        dyn = lookup(opts.dynamic_smem, name)
        if dyn is None:
            dyn = lookup(DYNAMIC_SMEM_TABLE, name, {}).get(precision, 0)
        blocks, limit = blocks_per_sm(arch, res["regs"], threads, res["smem"] + dyn)
        k = dict(name=name, mangled=mangled, threads=threads, threads_from=threads_from, dynamic_smem=dyn,
                 blocks_per_sm=blocks, limited_by=limit, **res)
        k["warps_per_sm"] = None if blocks is None else blocks * -(-threads // WARP)
        if any(s in name for s in selected) and mangled in functions:
            k["mix"] = analyse_loops(functions[mangled])
            for scope in ("loop", "outer_loop", "function"):
                if scope in k["mix"]:
                    m = k["mix"][scope]
                    m["smem_bound"] = smem_bound(arch, m["smem_bytes"], m["mma_flop"])
        kernels.append(k)
    kernels.sort(key=lambda k: k["name"])
    return dict(arch=arch, precision=precision, kernels=kernels)


# ---- output ----------------------------------------------------------------------------------------
FLOP_DEFINITION = ("FLOP/instr = FLOP per warp-instruction = (HMMA x 2mnk [4096 for HMMA.16816] + FFMA x 64"
                   " + (FADD+FMUL) x 32) / instructions; MMA FLOP/instr counts the HMMA alone.\n"
                   "smem B/HMMA: bytes through shared memory (LDSM .x1/.x2/.x4 128/256/512, LDS/STS/LDGSTS"
                   " width x 32) / HMMA; smem bound: min(1, 128 B/clock / (bytes per HMMA-FLOP x dense bf16"
                   " FLOP/clock/SM: 4096 sm_90, 2048 sm_80)), the fraction of peak shared memory can feed.\n"
                   "Counts are static (each instruction once, however often it runs). LD/ST: generic-address"
                   " loads/stores; LOCAL: LDL+STL; IDIV: integer / or % sequences (I2F.RP, MUFU.RCP, F2I.TRUNC).")


THREADS_MARK = {"launch bounds": "*", "default": "?"}


def format_resources(build):
    lim = SM_LIMITS.get(build["arch"])
    head = "sm_%d, %s" % (build["arch"], build["precision"])
    if lim:
        head += (" (per SM: %d KB shared memory, %d registers, %d threads, %d blocks; per block: %d KB shared"
                 " memory + 1 KB reserved)" % (lim["smem_per_sm"] >> 10, REGS_PER_SM, lim["threads_per_sm"],
                                              lim["blocks_per_sm"], lim["smem_per_block"] >> 10))
    width = max([len(k["name"]) for k in build["kernels"]] + [6])
    cols = ["regs", "spill st/ld", "stack", "smem", "dyn smem", "threads", "blocks/SM", "limit", "warps/SM"]
    widths = [5, 12, 6, 7, 9, 8, 10, 13, 9]
    lines = [head, "%-*s" % (width, "kernel") + "".join("%*s" % (w, c) for w, c in zip(widths, cols))]
    for k in build["kernels"]:
        blocks = "?" if k["blocks_per_sm"] is None else str(k["blocks_per_sm"])
        warps = "?" if k["warps_per_sm"] is None else "%d/%d" % (k["warps_per_sm"], lim["threads_per_sm"] // WARP)
        cells = [k["regs"], "%d/%d" % (k["spill_stores"], k["spill_loads"]), k["stack"], k["smem"],
                 k["dynamic_smem"], "%d%s" % (k["threads"], THREADS_MARK.get(k["threads_from"], "")),
                 blocks, k["limited_by"], warps]
        lines.append("%-*s" % (width, k["name"]) + "".join("%*s" % (w, c) for w, c in zip(widths, cells)))
    return "\n".join(lines)


MIX_HEAD = ["instr"] + [name for name, _ in MIX_COLUMNS[:10]] + ["IDIV"] + [name for name, _ in MIX_COLUMNS[10:]]


def format_mix(build):
    lines = []
    for k in build["kernels"]:
        mix = k.get("mix")
        if not mix:
            continue
        title = "%s (sm_%d, %s): %d loops" % (k["name"], build["arch"], build["precision"], mix["loops"])
        if "loop" in mix:
            lp, outer = mix["loop"], mix["outer_loop"]
            title += "; hot loop 0x%x-0x%x (%s), nesting depth %d" % (lp["start"], lp["end"], lp["source"],
                                                                      mix["depth"])
            if mix["depth"] > 1:
                title += "; outermost loop around it 0x%x-0x%x (%s)" % (outer["start"], outer["end"], outer["source"])
        lines.append(title)
        lines.append("%-12s" % "" + "".join("%7s" % c for c in MIX_HEAD)
                     + "  FLOP/instr  MMA FLOP/instr  smem B/HMMA  smem bound")
        for scope, label in (("loop", "hot loop"), ("outer_loop", "outer loop"), ("function", "function")):
            if scope in mix and not (scope == "outer_loop" and mix["depth"] == 1):
                m = mix[scope]
                per_hmma, bound = m.get("smem_bytes_per_hmma"), m.get("smem_bound")
                lines.append("%-12s" % label + "".join("%7d" % m[c] for c in MIX_HEAD)
                             + "%12.1f%16.1f" % (m["flop_per_instr"], m["mma_flop_per_instr"])
                             + "%13s%12s" % ("-" if per_hmma is None else "%.1f" % per_hmma,
                                              "-" if bound is None else "%.3f" % bound))
        lines.append("")
    return "\n".join(lines)


def format_gqa(build, scope="outer_loop"):
    """Grouped-query attention's instantiations against multi-head attention's, FLOP/instr of the
    main loop (the outer loop, its hot loop where it has none around it) and their ratio."""
    pairs = gqa_pairs(build)
    if not pairs:
        return ""
    width = max(len(g["name"]) for g, _ in pairs)
    lines = ["grouped-query (<HS, true>) against multi-head (<HS, false>) attention, sm_%d %s: FLOP/instr of the"
             " main loop" % (build["arch"], build["precision"]),
             "%-*s%10s%10s%8s%10s%10s%8s" % (width, "kernel", "MHA", "GQA", "ratio", "MHA mma", "GQA mma", "ratio")]
    for g, m in pairs:
        a, b = loop_figures(m["mix"], scope), loop_figures(g["mix"], scope)
        lines.append("%-*s%10.1f%10.1f%8.3f%10.1f%10.1f%8.3f" % (
            width, g["name"], a[0], b[0], b[0] / a[0], a[1], b[1], b[1] / a[1]))
    return "\n".join(lines) + "\n"


def loop_figures(mix, scope):
    """(FLOP/instr, MMA FLOP/instr) of a kernel's loop scope, the hot loop where there is no outer one."""
    m = mix.get(scope) or mix.get("loop") or mix["function"]
    return m["flop_per_instr"], m["mma_flop_per_instr"]


# ---- thresholds ------------------------------------------------------------------------------------
SCOPES = {"hot": "loop", "outer": "outer_loop", "function": "function"}


def check_thresholds(builds, opts):
    """[(ok, line)] for the thresholds given: per threshold and build one PASS line when every
    kernel it names passes, else a FAIL line per kernel that does not. A threshold naming no
    kernel fails (a renamed kernel must not pass unnoticed)."""
    verdicts = []

    def each(pairs, what, measure, good, fmt):
        for name, bound in pairs:
            for b in builds:
                where = "sm_%d %s" % (b["arch"], b["precision"])
                matched = [(k, measure(k)) for k in b["kernels"] if name in k["name"]]
                if not matched:
                    verdicts.append((False, "FAIL %s %s %s: no kernel matches %r" % (what, bound, where, name)))
                    continue
                failed = [(k, v) for k, v in matched if v is None or not good(v, bound)]
                for k, v in failed:
                    verdicts.append((False, "FAIL %s %s %s %s: %s" % (what, bound, where, k["name"], fmt(v))))
                if not failed:
                    shown = matched[0] if len(matched) == 1 else "%s %d kernels%s" % (
                        "all" if not name else "the", len(matched), " matching %r" % name if name else "")
                    verdicts.append((True, "PASS %s %s %s %s%s" % (
                        what, bound, where, shown if isinstance(shown, str) else shown[0]["name"],
                        "" if len(matched) > 1 else ": " + fmt(matched[0][1]))))

    scope = SCOPES[opts.flop_scope]

    def flop(k):
        mix = k.get("mix")
        return mix[scope]["flop_per_instr"] if mix and scope in mix else None
    each(opts.min_flop_per_instr, "min-flop-per-instr", flop, lambda v, b: v >= b,
         lambda v: "no loop" if v is None else "%.1f FLOP/instr (%s)" % (v, opts.flop_scope))

    def smem_per_hmma(k):
        mix = k.get("mix")
        return mix[scope].get("smem_bytes_per_hmma") if mix and scope in mix else None
    each(opts.max_smem_bytes_per_hmma, "max-smem-bytes-per-hmma", smem_per_hmma, lambda v, b: v <= b,
         lambda v: "no loop with HMMA" if v is None else "%.1f shared bytes per HMMA (%s)" % (v, opts.flop_scope))
    each(opts.max_spills, "max-spills", lambda k: k["spill_stores"] + k["spill_loads"], lambda v, b: v <= b,
         lambda v: "%d spill bytes" % v)
    each(opts.min_blocks_per_sm, "min-blocks-per-sm", lambda k: k["blocks_per_sm"], lambda v, b: v >= b,
         lambda v: "? blocks/SM" if v is None else "%d blocks/SM" % v)
    if opts.min_gqa_ratio is not None:
        for b in builds:
            where = "sm_%d %s" % (b["arch"], b["precision"])
            pairs = gqa_pairs(b)
            if not pairs:
                verdicts.append((False, "FAIL min-gqa-ratio %g %s: no <HS, true> kernel with a <HS, false> sibling"
                                 % (opts.min_gqa_ratio, where)))
            for g, m in pairs:
                ratio = loop_figures(g["mix"], scope)[0] / loop_figures(m["mix"], scope)[0]
                ok = ratio >= opts.min_gqa_ratio
                verdicts.append((ok, "%s min-gqa-ratio %g %s %s: %.3f of %s's FLOP/instr (%s)" % (
                    "PASS" if ok else "FAIL", opts.min_gqa_ratio, where, g["name"], ratio, m["name"], opts.flop_scope)))
    return verdicts


# ---- main ------------------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="80 90", help='compute capabilities, e.g. "90" or "80 90" (default)')
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32", "both"])
    p.add_argument("--source", default="train_gpt.cu", help="the translation unit to compile (default train_gpt.cu)")
    p.add_argument("--kernel", action="append", default=[],
                   help="also analyse the loops of kernels whose name contains this (repeatable; '' = all)")
    p.add_argument("--only", action="store_true", help="analyse the --kernel ones only, not the attention kernels")
    p.add_argument("--head-size", type=int, default=64,
                   help="kernels templated on the head size (name<N>) are shown at this one only (default 64, "
                        "GPT-2's; 0: every instantiation)")
    p.add_argument("--threads", action="append", metavar="NAME=N", help="threads per block of kernels matching NAME")
    p.add_argument("--dynamic-smem", action="append", metavar="NAME=BYTES",
                   help="dynamic shared memory per block of kernels matching NAME")
    p.add_argument("--json", metavar="FILE", help="also write everything measured as JSON")
    p.add_argument("--check", action="store_true", help="print only the thresholds' verdicts (exit 1 if one fails)")
    p.add_argument("--min-flop-per-instr", action="append", metavar="NAME=X",
                   help="FLOP/instr of kernels matching NAME (see --flop-scope) must reach X")
    p.add_argument("--flop-scope", default="outer", choices=sorted(SCOPES),
                   help="which FLOP/instr --min-flop-per-instr checks: the hot loop's, the outermost loop's "
                        "around it (default: the whole main loop, what each of its iterations costs), the function's")
    p.add_argument("--max-spills", action="append", metavar="[NAME=]N",
                   help="spill bytes (stores + loads) of kernels matching NAME (all without NAME) at most N")
    p.add_argument("--min-blocks-per-sm", action="append", metavar="NAME=N", help="blocks per SM at least N")
    p.add_argument("--max-smem-bytes-per-hmma", action="append", metavar="NAME=X",
                   help="shared-memory bytes per HMMA of kernels matching NAME (the loop of --flop-scope) at most X")
    p.add_argument("--min-gqa-ratio", type=float, metavar="R",
                   help="FLOP/instr (see --flop-scope) of each grouped-query instantiation name<HS, true> at least R"
                        " times its multi-head sibling name<HS, false>'s")
    p.add_argument("--nvcc", help="nvcc to use (default: PATH, then CUDA_HOME/bin)")
    p.add_argument("--include", action="append", default=[], metavar="DIR", help="extra -I for nvcc (e.g. NCCL's)")
    p.add_argument("--nvcc-flags", default="", help="extra nvcc flags, one string: --nvcc-flags=\"-DX -lineinfo\"")
    opts = p.parse_args(argv)
    for attr in ("threads", "dynamic_smem", "min_flop_per_instr", "max_spills", "min_blocks_per_sm",
                 "max_smem_bytes_per_hmma"):
        setattr(opts, attr, overrides(getattr(opts, attr), "--" + attr.replace("_", "-")))
    try:
        opts.arch = [int(a.replace("sm_", "").replace("compute_", "")) for a in re.split(r"[\s,]+", opts.arch.strip())]
    except ValueError:
        p.error("--arch wants compute capabilities such as \"80 90\", not %r" % opts.arch)
    if opts.json:  # where the JSON goes, checked before the compiles (minutes), not after them
        folder = os.path.dirname(os.path.abspath(opts.json))
        why = ("is a directory" if os.path.isdir(opts.json) else
               "is in %s, which is not a directory" % folder if not os.path.isdir(folder) else
               "is in %s, which is not writable" % folder if not os.access(folder, os.W_OK) else "")
        if why:
            print("sass_report: --json %s %s" % (opts.json, why), file=sys.stderr)
            sys.exit(2)
    return opts


def default_includes():
    """NCCL's header (train_gpt.cu includes nccl.h): where gpu.mk looks first."""
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for d in (os.path.join(cuda, "include"), "/usr/include", "/usr/local/include"):
        if os.path.exists(os.path.join(d, "nccl.h")):
            return [d]
    return []


def main(argv=None):
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.nvcc and not (os.path.isfile(opts.nvcc) and os.access(opts.nvcc, os.X_OK)):  # not another nvcc instead
        print("sass_report: nvcc not found: --nvcc %s is not an executable file" % opts.nvcc, file=sys.stderr)
        return 2
    nvcc = find_nvcc(opts.nvcc)
    if not nvcc:
        print("sass_report: nvcc not found (PATH, CUDA_HOME/bin or --nvcc): make sass needs the CUDA toolkit",
              file=sys.stderr)
        return 2
    cuobjdump, nvdisasm = ensure_tools(nvcc)
    cuda_root = os.path.dirname(os.path.dirname(nvcc))
    TOOLKIT_DIRS.extend({cuda_root + os.sep, os.path.realpath(cuda_root) + os.sep})
    source = os.path.join(ROOT, opts.source) if not os.path.isabs(opts.source) else opts.source
    includes = opts.include or default_includes()
    precisions = ["bf16", "fp32"] if opts.precision == "both" else [opts.precision]
    selected = ([] if opts.only else ["attention"]) + opts.kernel + [name for name, _ in opts.min_flop_per_instr]
    selected += [name for name, _ in opts.max_smem_bytes_per_hmma]
    jobs = [(arch, prec) for prec in precisions for arch in opts.arch]
    if not opts.check:
        print("compiling %s for %s (%s) with %s -cubin -Xptxas -v ..." % (
            os.path.relpath(source, ROOT), ", ".join("sm_%d" % a for a in opts.arch), ", ".join(precisions), nvcc),
            flush=True)
    # the compiles are the slow part (about 25 s each): as many at once as there are processors
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        cubins = list(pool.map(lambda job: compile_cubin(nvcc, source, job[0], job[1], includes,
                                                         opts.nvcc_flags.split()), jobs))
    builds = []
    for (arch, prec), (cubin, ptxas_text) in zip(jobs, cubins):
        elf = run_tool([cuobjdump, "-elf", cubin])
        sass = run_tool([nvdisasm, "-c", "-g", cubin])
        builds.append(report_build(arch, prec, ptxas_text, elf, sass, selected, opts))
    if not opts.check:
        print("threads: from __launch_bounds__ (*), else the launches in gpu/*.cuh, or 256 for a kernel not in the"
              " script's table (?); --threads NAME=N sets it.\ndyn smem: the trainer's at hs=64 from the script's"
              " table, else 0; --dynamic-smem NAME=BYTES sets it.\n")
        for b in builds:
            print(format_resources(b) + "\n")
        print(FLOP_DEFINITION + "\n")
        for b in builds:
            print(format_mix(b))
        for b in builds:
            table = format_gqa(b, SCOPES[opts.flop_scope])
            if table:
                print(table)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(dict(source=os.path.relpath(source, ROOT), flop_definition=FLOP_DEFINITION, builds=builds),
                      f, indent=1)
    verdicts = check_thresholds(builds, opts)
    for ok, line in verdicts:
        print(line)
    if opts.check and not verdicts:
        print("sass_report: --check without thresholds (--min-flop-per-instr, --max-spills, --min-blocks-per-sm,"
              " --min-gqa-ratio, --max-smem-bytes-per-hmma)")
    return 0 if all(ok for ok, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
