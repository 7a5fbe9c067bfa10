// SPDX-License-Identifier: MIT

// go_alloc_bench is alloc_bench.c's workload in Go, for the Go row of `make bench-peers`:
// W warm-up and N measured batches of B escaping allocations per goroutine, 16-byte or
// mixed sizes (the same log-uniform 16 B .. 4 KiB table, built by the same arithmetic),
// one or two goroutines. It prints the same RESULT line as alloc_bench.
//
// Go has no free: the garbage collector is switched off (debug.SetGCPercent(-1)) as in the
// original proposal's Go runs, and runtime.GC() runs before every batch, outside the timed
// region, so a batch's heap (up to 250,000 x 4 KiB) is collected between batches and the
// timed region holds allocation and profiling only.
//
// -rate sets runtime.MemProfileRate first thing in main: 0 (profiling off, the baseline),
// 1 (every allocation), or "default" (left at Go's 512 KiB).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"time"
)

const mixedTable = 4096

var mixedSizes [mixedTable]uint16

// One escaping slot per goroutine, on its own cache line.
type slot struct {
	p   []byte
	pad [40]byte
}

var sinks [64]slot

func mixedInit() {
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < mixedTable; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		u := float64(x>>11) / float64(uint64(1)<<53)
		s := 16.0
		e := 8.0 * u
		ip := int(e)
		fp := e - float64(ip)
		for k := 0; k < ip; k++ {
			s *= 2.0
		}
		t, term, sum := fp*0.6931471805599453, 1.0, 1.0
		for k := 1; k < 12; k++ {
			term *= t / float64(k)
			sum += term
		}
		s *= sum
		v := uint(s)
		if v < 16 {
			v = 16
		}
		if v > 4096 {
			v = 4096
		}
		mixedSizes[i] = uint16(v)
	}
}

//go:noinline
func loopSmall(id int, n int) {
	s := &sinks[id]
	for i := 0; i < n; i++ {
		s.p = make([]byte, 16)
	}
}

//go:noinline
func loopMixed(id int, n int, start uint) {
	s := &sinks[id]
	for i := 0; i < n; i++ {
		s.p = make([]byte, mixedSizes[(start+uint(i))&(mixedTable-1)])
	}
}

func main() {
	rate := flag.String("rate", "default", "runtime.MemProfileRate: 0, 1, N or default")
	wl := flag.String("w", "small", "small or mixed")
	threads := flag.Int("t", 1, "goroutines allocating at once")
	warmup := flag.Int("W", 5, "warm-up batches")
	batches := flag.Int("n", 61, "measured batches")
	batch := flag.Int("b", 250000, "allocations per batch")
	flag.Parse()
	if *rate != "default" {
		r, err := strconv.Atoi(*rate)
		if err != nil || r < 0 {
			fmt.Fprintln(os.Stderr, "go_alloc_bench: bad -rate")
			os.Exit(2)
		}
		runtime.MemProfileRate = r
	}
	if *threads < 1 || *threads > 64 || *batches < 1 || *warmup < 0 || *batch < 1 {
		fmt.Fprintln(os.Stderr, "go_alloc_bench: bad arguments")
		os.Exit(2)
	}
	if *threads > runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(*threads)
	}
	debug.SetGCPercent(-1)
	mixedInit()
	small := *wl == "small"
	ns := make([][]float64, *threads)
	for t := range ns {
		ns[t] = make([]float64, *batches)
	}
	t0 := time.Now()
	for b := 0; b < *warmup+*batches; b++ {
		runtime.GC()
		var wg sync.WaitGroup
		// A barrier: every goroutine starts its batch once all are running.
		var ready sync.WaitGroup
		ready.Add(*threads)
		startGate := make(chan struct{})
		for t := 0; t < *threads; t++ {
			wg.Add(1)
			go func(id int) {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				ready.Done()
				<-startGate
				start := uint(id*1021 + b**batch)
				s := time.Now()
				if small {
					loopSmall(id, *batch)
				} else {
					loopMixed(id, *batch, start)
				}
				d := time.Since(s)
				if b >= *warmup {
					ns[id][b-*warmup] = float64(d.Nanoseconds()) / float64(*batch)
				}
			}(t)
		}
		ready.Wait()
		close(startGate)
		wg.Wait()
	}
	elapsed := time.Since(t0).Seconds()
	var all []float64
	for t := range ns {
		all = append(all, ns[t]...)
	}
	sort.Float64s(all)
	n := len(all)
	med := all[n/2]
	if n%2 == 0 {
		med = (all[n/2-1] + all[n/2]) / 2
	}
	mean := 16.0
	if !small {
		sum := 0.0
		for _, v := range mixedSizes {
			sum += float64(v)
		}
		mean = sum / mixedTable
	}
	name := "small"
	if !small {
		name = "mixed"
	}
	// Referencing runtime.MemProfile keeps profiling on: a program that never reads the
	// profile gets MemProfileRate forced to 0 by the linker (runtime.disableMemoryProfiling).
	records, _ := runtime.MemProfile(nil, true)
	fmt.Printf("RESULT median=%.3f min=%.3f max=%.3f workload=%s threads=%d batches=%d "+
		"batch=%d mean_size=%.1f seconds=%.2f memprofilerate=%d profile_records=%d\n",
		med, all[0], all[n-1], name, *threads, *batches, *batch, mean, elapsed,
		runtime.MemProfileRate, records)
}
