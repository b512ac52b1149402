// Command klauspost-bench measures github.com/klauspost/reedsolomon on the shapes eckpt's
// `eckpt bench codec` measures its own codec on, so that the two can be compared in one run.
//
// Usage:
//
//	klauspost-bench [-variant auto|avxgfni|nogfni|avx2|ssse3] [-g N] [-reps N] [-mint S] [k:m:KiB ...]
//
// For each shape it times three operations and prints one line with, for each, the median,
// minimum and maximum over the repetitions of 10^9 data bytes (k shards) per second:
//
//   - Encode: the m parities from the k data shards;
//   - EncodeIdx: every data shard's contribution added to the parities, one shard at a time
//     (the library's partial update);
//   - ReconstructData: the first m data shards rebuilt from the rest.
//
// The results are checked against each other (EncodeIdx must add up to Encode's parities,
// ReconstructData must give back the lost shards); a line that fails ends with VERIFY-FAIL.
// The two lines starting with '#' say which library, Go and CPU ran. The output format is
// read by crates/cli/src/commands/bench/klauspost.rs: change both together.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/cpuid/v2"
	"github.com/klauspost/reedsolomon"
)

const libraryPath = "github.com/klauspost/reedsolomon"

// shape is one RS(k,m) code on shards of kib KiB.
type shape struct{ k, m, kib int }

// summary is the median, minimum and maximum of one operation's repetitions, in GB/s.
type summary struct{ median, min, max float64 }

func (s summary) String() string {
	return fmt.Sprintf("%6.2f [%6.2f,%6.2f]", s.median, s.min, s.max)
}

func summarize(samples []float64) summary {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	n := len(sorted)
	median := sorted[n/2]
	if n%2 == 0 {
		median = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return summary{median, sorted[0], sorted[n-1]}
}

// measure runs op once to warm up, then reps times for at least minSeconds each, and
// summarizes the throughput of each repetition as dataBytes per call.
func measure(reps int, minSeconds float64, dataBytes int, op func()) summary {
	op()
	rates := make([]float64, 0, reps)
	for range reps {
		calls := 0
		start := time.Now()
		for {
			op()
			calls++
			if elapsed := time.Since(start).Seconds(); elapsed >= minSeconds {
				rates = append(rates, float64(dataBytes)*float64(calls)/elapsed/1e9)
				break
			}
		}
	}
	return summarize(rates)
}

// kernelOptions forces the library to a kernel level by turning off every faster one.
func kernelOptions(variant string) ([]reedsolomon.Option, error) {
	levels := []struct {
		name    string
		disable reedsolomon.Option
	}{
		{"avxgfni", reedsolomon.WithGFNI(false)},   // 512-bit GFNI off, 256-bit AVX+GFNI kept
		{"nogfni", reedsolomon.WithAVXGFNI(false)}, // PSHUFB kernels only (AVX-512, AVX2)
		{"avx2", reedsolomon.WithAVX512(false)},    // AVX2 PSHUFB kernels
		{"ssse3", reedsolomon.WithAVX2(false)},     // SSSE3 kernels
	}
	if variant == "auto" {
		return nil, nil
	}
	var opts []reedsolomon.Option
	for _, level := range levels {
		opts = append(opts, level.disable)
		if level.name == variant {
			return opts, nil
		}
	}
	return nil, fmt.Errorf("unknown -variant %q (auto, avxgfni, nogfni, avx2 or ssse3)", variant)
}

// libraryVersion is the version of reedsolomon this binary was built with.
func libraryVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == libraryPath {
				if dep.Replace != nil {
					return dep.Replace.Version
				}
				return dep.Version
			}
		}
	}
	return "(unknown version)"
}

func parseShapes(args []string) ([]shape, error) {
	var shapes []shape
	for _, arg := range args {
		var s shape
		var rest string
		if n, _ := fmt.Sscanf(arg+":end", "%d:%d:%d:%s", &s.k, &s.m, &s.kib, &rest); n != 4 || rest != "end" ||
			s.k < 1 || s.m < 1 || s.kib < 1 {
			return nil, fmt.Errorf("shape %q is not k:m:KiB with positive numbers", arg)
		}
		shapes = append(shapes, s)
	}
	if len(shapes) == 0 {
		for _, km := range [][2]int{{4, 2}, {8, 2}, {10, 4}, {32, 2}} {
			for _, kib := range []int{64, 1024, 16384} {
				shapes = append(shapes, shape{km[0], km[1], kib})
			}
		}
	}
	return shapes, nil
}

// run measures one shape and returns its result line.
func run(s shape, opts []reedsolomon.Option, reps int, minSeconds float64) (string, error) {
	enc, err := reedsolomon.New(s.k, s.m, opts...)
	if err != nil {
		return "", err
	}
	size := s.kib * 1024
	dataBytes := s.k * size
	shards := make([][]byte, s.k+s.m)
	random := rand.New(rand.NewSource(int64(s.k*1_000_003 + s.m*1_009 + s.kib)))
	for i := range shards {
		shards[i] = make([]byte, size)
		if i < s.k {
			random.Read(shards[i])
		}
	}
	data, parity := shards[:s.k], shards[s.k:]
	check := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	verified := true

	encode := measure(reps, minSeconds, dataBytes, func() { check(enc.Encode(shards)) })
	want := make([][]byte, s.m)
	for i, p := range parity {
		want[i] = slices.Clone(p)
	}

	addAll := func() {
		for i, d := range data {
			check(enc.EncodeIdx(d, i, parity))
		}
	}
	for _, p := range parity {
		clear(p)
	}
	addAll()
	for i, p := range parity {
		verified = verified && bytes.Equal(p, want[i])
	}
	// Each timed call adds every shard once more; the parities stop being a code word, which
	// costs the library nothing.
	update := measure(reps, minSeconds, dataBytes, addAll)
	for i, p := range parity {
		copy(p, want[i])
	}

	lost := make([][]byte, s.m)
	for i := range lost {
		lost[i] = slices.Clone(data[i])
	}
	decode := measure(reps, minSeconds, dataBytes, func() {
		for i := range lost {
			shards[i] = shards[i][:0] // missing, its buffer reused
		}
		check(enc.ReconstructData(shards))
	})
	for i, l := range lost {
		verified = verified && bytes.Equal(shards[i], l)
	}

	block := fmt.Sprintf("%dKiB", s.kib)
	if s.kib%1024 == 0 {
		block = fmt.Sprintf("%dMiB", s.kib/1024)
	}
	line := fmt.Sprintf("%-4d %-3d %-9s | %s   | %s   | %s", s.k, s.m, block, encode, update, decode)
	if !verified {
		line += " VERIFY-FAIL"
	}
	return line, nil
}

func main() {
	variant := flag.String("variant", "auto", "kernel level: auto|avxgfni|nogfni|avx2|ssse3")
	goroutines := flag.Int("g", 0, "the library's WithMaxGoroutines (0 = its default)")
	reps := flag.Int("reps", 5, "repetitions of each operation")
	minSeconds := flag.Float64("mint", 0.25, "minimum seconds of each repetition")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [flags] [k:m:KiB ...]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()

	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "klauspost-bench:", err)
		os.Exit(2)
	}
	if *reps < 1 || *minSeconds < 0 || *goroutines < 0 {
		fail(fmt.Errorf("-reps must be at least 1, -mint and -g not negative"))
	}
	shapes, err := parseShapes(flag.Args())
	if err != nil {
		fail(err)
	}
	opts, err := kernelOptions(*variant)
	if err != nil {
		fail(err)
	}
	if *goroutines > 0 {
		opts = append(opts, reedsolomon.WithMaxGoroutines(*goroutines))
	}

	fmt.Printf("# klauspost/reedsolomon %s %s GOMAXPROCS=%d NumCPU=%d variant=%s maxGoroutines=%d reps=%d mint=%.2fs\n",
		libraryVersion(), runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), *variant, *goroutines,
		*reps, *minSeconds)
	features := []struct {
		name string
		id   cpuid.FeatureID
	}{
		{"AVX2", cpuid.AVX2}, {"AVX512F", cpuid.AVX512F}, {"AVX512BW", cpuid.AVX512BW},
		{"AVX512VL", cpuid.AVX512VL}, {"AVX512DQ", cpuid.AVX512DQ}, {"GFNI", cpuid.GFNI},
	}
	var detected strings.Builder
	for _, f := range features {
		fmt.Fprintf(&detected, " %s=%v", f.name, cpuid.CPU.Supports(f.id))
	}
	fmt.Printf("# cpuid: %s %s\n", cpuid.CPU.BrandName, detected.String())
	fmt.Printf("%-4s %-3s %-9s | %-24s | %-24s | %-24s\n", "k", "m", "block",
		"encode GB/s med [min,max]", "EncodeIdx GB/s med[min,max]", "ReconstructData GB/s")
	for _, s := range shapes {
		line, err := run(s, opts, *reps, *minSeconds)
		if err != nil {
			fail(fmt.Errorf("RS(%d,%d): %w", s.k, s.m, err))
		}
		fmt.Println(line)
	}
}
