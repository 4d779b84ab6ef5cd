// Command benchreport measures cloudbus against its baselines side by side
// in one run and prints the table that README.md and docs/delivery.md
// quote. Run it from the module root, with RabbitMQ reachable:
//
//	CLOUDBUS_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ go run ./cmd/benchreport
//
// It runs, as go test subprocesses, the RabbitMQ benchmarks of
// bus/amqpbus (the bus and its raw amqp091-go twin with the same
// settings, in the confirmed and the fast delivery mode, one-way and
// Call at 1 and 64 callers), the in-memory bus's Call against Go
// channels doing the same JSON (package bus), and the ring's balance
// test and Locate benchmark. Each runs in -count rounds (default 5), one
// go test process per round, so the bus and its baseline alternate (go
// test -count would repeat each sub-benchmark in a row), and every other
// round runs each RabbitMQ baseline before its bus benchmark
// (CLOUDBUS_BENCH_BASELINE_FIRST=1): in one process the second of a pair
// measures faster. The table gives medians, with the p99 latency of the
// calls, and each ratio of medians.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	count := flag.Int("count", 5, "runs of each benchmark; the table gives medians")
	benchtime := flag.String("benchtime", "2s", "go test -benchtime of the RabbitMQ benchmarks")
	flag.Parse()
	if os.Getenv("CLOUDBUS_AMQP_URL") == "" {
		fmt.Fprintln(os.Stderr, "benchreport: set CLOUDBUS_AMQP_URL (e.g. amqp://guest:guest@127.0.0.1:5672/): the bus benchmarks run against RabbitMQ")
		os.Exit(2)
	}
	start := time.Now()
	amqp, err := bench("./bus/amqpbus", "^(BenchmarkSend|BenchmarkCall)$", *benchtime, *count)
	check(err)
	mem, err := bench("./bus", "^BenchmarkCall$", "1s", *count)
	check(err)
	ring, err := bench("./ring", "^BenchmarkLocate$", "1s", *count)
	check(err)
	balance, err := goTest("./ring", "-count=1", "-run", "^(TestDefaultRingBalance|TestTableExactShares)$", "-v")
	check(err)

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Printf("cloudbus benchmark report, %s, %d runs each (medians), GOMAXPROCS=%s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), *count, gomaxprocs())
	fmt.Fprintln(w, "\tbus\tbaseline\tbus/baseline\t")
	for _, mode := range []struct{ name, bus, raw string }{
		{"confirmed", "bus", "raw-amqp091"},
		{"fast", "bus-fast", "raw-amqp091-fast"},
	} {
		row(w, "one-way msgs/s, 64 senders, "+mode.name, amqp, "BenchmarkSend/"+mode.bus, "BenchmarkSend/"+mode.raw, "msgs/s", false)
		callBus, callRaw := "BenchmarkCall/"+mode.bus+"/callers=", "BenchmarkCall/"+mode.raw+"/callers="
		row(w, "Call p50 µs, 1 caller, "+mode.name, amqp, callBus+"1", callRaw+"1", "p50-µs", true)
		row(w, "Call p99 µs, 1 caller, "+mode.name, amqp, callBus+"1", callRaw+"1", "p99-µs", true)
		row(w, "Call calls/s, 64 callers, "+mode.name, amqp, callBus+"64", callRaw+"64", "calls/s", false)
		row(w, "Call p99 µs, 64 callers, "+mode.name, amqp, callBus+"64", callRaw+"64", "p99-µs", true)
	}
	row(w, "membus Call ns vs Go channels + JSON", mem, "BenchmarkCall/membus", "BenchmarkCall/go-channels+json", "ns/op", true)
	row(w, "membus Call B vs Go channels + JSON", mem, "BenchmarkCall/membus", "BenchmarkCall/go-channels+json", "B/op", true)
	row(w, "membus Call allocs vs Go channels + JSON", mem, "BenchmarkCall/membus", "BenchmarkCall/go-channels+json", "allocs/op", true)
	check(w.Flush())

	fmt.Println("\nring (go test ./ring -run 'TestDefaultRingBalance|TestTableExactShares' -v; go test ./ring -bench Locate):")
	for _, l := range strings.Split(balance, "\n") {
		if strings.Contains(l, "members") || strings.Contains(l, "max/mean") {
			fmt.Println("  " + strings.TrimSpace(l))
		}
	}
	for _, name := range ring.names() {
		fmt.Printf("  %s: %.1f ns/op, %.0f allocs/op\n", name, ring.median(name, "ns/op"), ring.median(name, "allocs/op"))
	}
	fmt.Printf("\nmeasured in %s\n", time.Since(start).Round(time.Second))
}

// row prints one line of the table: the medians of unit for the bus and
// the baseline, and their ratio; lowerBetter says which way is better
// (for the reader: the ratio is always bus/baseline).
func row(w *tabwriter.Writer, what string, r results, bus, base, unit string, lowerBetter bool) {
	b, x := r.median(bus, unit), r.median(base, unit)
	better := "higher is better"
	if lowerBetter {
		better = "lower is better"
	}
	ratio := "-"
	if x > 0 {
		ratio = fmt.Sprintf("%.2fx", b/x)
	}
	fmt.Fprintf(w, "%s (%s)\t%s\t%s\t%s\t\n", what, better, num(b), num(x), ratio)
}

func num(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

// results maps a benchmark name (without the -GOMAXPROCS suffix) and a
// unit to every value measured.
type results map[string]map[string][]float64

func (r results) median(name, unit string) float64 {
	v := slices.Clone(r[name][unit])
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func (r results) names() []string {
	var out []string
	for n := range r {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// benchLine matches a result line: name-procs, iterations, then value
// and unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// bench runs the benchmarks matching pattern in pkg, in count rounds of
// one go test process each (every other one with the baselines first),
// and parses them.
func bench(pkg, pattern, benchtime string, count int) (results, error) {
	var all strings.Builder
	for round := range count {
		env := []string{"CLOUDBUS_BENCH_BASELINE_FIRST=" + strconv.Itoa(round%2)}
		out, err := goTestEnv(env, pkg, "-run", "^$", "-bench", pattern, "-benchmem", "-benchtime", benchtime, "-count", "1")
		if err != nil {
			return nil, err
		}
		all.WriteString(out)
	}
	out := all.String()
	r := results{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if r[m[1]] == nil {
				r[m[1]] = map[string][]float64{}
			}
			r[m[1]][f[i+1]] = append(r[m[1]][f[i+1]], v)
		}
	}
	if len(r) == 0 {
		return nil, fmt.Errorf("benchreport: go test %s printed no benchmark results:\n%s", pkg, out)
	}
	return r, nil
}

// goTest runs go test on pkg with args, printing progress to stderr, and
// returns its output.
func goTest(pkg string, args ...string) (string, error) {
	return goTestEnv(nil, pkg, args...)
}

// goTestEnv is goTest with env added to the environment.
func goTestEnv(env []string, pkg string, args ...string) (string, error) {
	args = append([]string{"test", pkg}, args...)
	fmt.Fprintf(os.Stderr, "benchreport: %sgo %s\n", strings.Join(append(env, ""), " "), strings.Join(args, " "))
	var out bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("benchreport: go %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func gomaxprocs() string {
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		return v
	}
	out, err := exec.Command("nproc").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
