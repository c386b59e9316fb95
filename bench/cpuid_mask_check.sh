#!/bin/sh
# ctest bench_cpuid_mask: bench/cpuid_mask.cpp makes an AVX-512 host look AVX2-only to a process
# (fma_roof reports "isa": "avx2" under it, "avx512" without), and a real SIGSEGV still kills.
# Usage: cpuid_mask_check.sh LIBGRAFT_CPUID_MASK FMA_ROOF. Exit 77 (ctest: skipped) with the reason
# where there is nothing to check.
lib=$1 roof=$2
grep -qw avx512f /proc/cpuinfo || { echo "skipped: this host has no AVX-512 to hide"; exit 77; }
grep -qw cpuid_fault /proc/cpuinfo || { echo "skipped: this CPU/VM has no CPUID faulting (cpuid_fault)"; exit 77; }
plain=$("$roof" --threads 1 --seconds 0.05)
masked=$(LD_PRELOAD="$lib" "$roof" --threads 1 --seconds 0.05)
echo "without: $plain"
echo "with:    $masked"
echo "$plain" | grep -q '"isa": "avx512"' || { echo "FAIL: fma_roof does not see AVX-512 without the mask"; exit 1; }
echo "$masked" | grep -q '"isa": "avx2"' || { echo "FAIL: AVX-512 still visible under the mask"; exit 1; }
out=$( (LD_PRELOAD="$lib" sh -c 'kill -SEGV $$; echo survived') 2>/dev/null); echo "$out" | grep -q survived && { echo "FAIL: a SIGSEGV sent was swallowed"; exit 1; }
echo ok
