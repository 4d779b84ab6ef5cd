//go:build ignore

// testsummary reads `go test -json` from stdin and prints one line per
// package, every skipped test with its reason, and the whole output of
// every failed test (its own lines only, even when tests ran in
// parallel), then, last, the failed assertions of each failed test in
// brief (where a page that shows only the end of CI's output finds
// them). It exits 1 if anything failed. Run from the module root:
//
//	go test -json ./... | go run .ci/testsummary.go
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	out := map[string]*strings.Builder{} // package/test -> output
	failed := false
	var brief []string // the failed tests' assertion lines, printed last
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // a build error or other plain line
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			b := out[key]
			if b == nil {
				b = &strings.Builder{}
				out[key] = b
			}
			b.WriteString(e.Output)
		case "skip":
			if e.Test != "" {
				fmt.Printf("SKIP %s %s\n%s", e.Package, e.Test, indentReason(out[key]))
			}
		case "fail":
			failed = true
			if e.Test == "" {
				fmt.Printf("FAIL %s (%.1fs)\n", e.Package, e.Elapsed)
				if b := out[key]; b != nil && !strings.Contains(b.String(), "--- FAIL") {
					fmt.Print(b.String()) // a panic, a timeout, a build failure
				}
			} else {
				fmt.Printf("--- FAIL %s %s (%.2fs)\n", e.Package, e.Test, e.Elapsed)
				brief = append(brief, fmt.Sprintf("--- FAIL %s %s (%.2fs)", e.Package, e.Test, e.Elapsed))
				if b := out[key]; b != nil {
					fmt.Print(b.String())
					brief = append(brief, assertionLines(b.String())...)
				}
			}
		case "pass":
			if e.Test == "" {
				fmt.Printf("ok   %s (%.1fs)\n", e.Package, e.Elapsed)
			}
		}
		if e.Action == "pass" || e.Action == "skip" {
			delete(out, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Println("testsummary:", err)
		os.Exit(2)
	}
	if failed {
		if len(brief) > 0 {
			fmt.Println("\nthe failures in brief:")
			for _, l := range brief {
				fmt.Println(l)
			}
		}
		os.Exit(1)
	}
}

// assertionLines returns the lines of a test's output that say why it
// failed (testify's Error and Messages, a panic), each cut to 400 bytes.
func assertionLines(out string) []string {
	var r []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "Error:") || strings.HasPrefix(t, "Messages:") || strings.HasPrefix(t, "panic:") {
			if len(t) > 400 {
				t = t[:400] + "…"
			}
			r = append(r, "    "+t)
		}
	}
	return r
}

// indentReason returns the skip message lines of a skipped test.
func indentReason(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	var r strings.Builder
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, ".go:") {
			r.WriteString("     " + strings.TrimSpace(l) + "\n")
		}
	}
	return r.String()
}
