// cooperative_groups/scan.h on the CPU runtime: cpu.mk puts cpu_cuda/include ahead of the toolkit, so this
// stands in for the toolkit's header (which needs nvcc). See cpu_cuda/cooperative_groups.h.
#pragma once
#include "../../cooperative_groups.h"
