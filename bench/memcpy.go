package bench

import (
	"bytes"
	"time"
)

// ---------------------------------------------------------------- memcpy

var memcpySink []byte

// benchMemcpy is the CPU copying size bytes from one buffer to another,
// over and over: the scale against which the device's copies are judged.
func benchMemcpy(c *Config, size int) (*Result, error) {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	batch := max(1, (64<<10)/size)
	r := &Result{Op: "memcpy", Mode: "bw", Bytes: size, QPs: 1, Threads: 1, PostList: 1}
	copyN := func(n int) {
		for range n {
			copy(dst, src)
		}
	}
	copyN(max(c.Warmup, batch))
	var before rusage
	before.read()
	samples := make([]benchSample, 0, 1<<14)
	samples = append(samples, benchSample{0, 0})
	start := time.Now()
	var done uint64
	var now int64
	for {
		copyN(batch)
		done += uint64(batch)
		now = int64(time.Since(start))
		if now-samples[len(samples)-1].t >= int64(50*time.Microsecond) {
			samples = append(samples, benchSample{now, done})
		}
		if c.Duration > 0 && now >= int64(c.Duration) || c.Duration == 0 && done >= uint64(c.Iters) {
			break
		}
	}
	samples = append(samples, benchSample{now, done})
	memcpySink = dst
	var after rusage
	after.read()
	r.CPUUser, r.CPUSys = after.user-before.user, after.sys-before.sys
	secs := float64(now) / 1e9
	r.WRs, r.Iterations, r.Seconds = done, done, secs
	r.MsgRate = float64(done) / secs / 1e6
	r.BWAvg = float64(done) * float64(size) / secs / (1 << 20)
	r.BWPeak = max(r.BWAvg, peakRate(samples, now)*float64(size)*1e9/(1<<20))
	r.Check = "ok"
	if !bytes.Equal(src, dst) {
		r.Check = "the copy differs"
	}
	return r, nil
}
