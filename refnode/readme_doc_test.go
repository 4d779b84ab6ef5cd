package main

import (
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The drift tests of the README and the documents around it.
// TestReadme holds the README to an overview that starts with building;
// TestDocLinks checks that every relative link of the documentation
// names a file and a heading that exist; TestGuaranteesKeepTheirCommands
// that every measured section keeps the command that measures it;
// TestReadmeSnippet that the "Write your own service" snippet compiles.
// Each failure says what to change in which file.

const (
	readmePath     = "../README.md"
	guaranteesPath = "../docs/guarantees.md"
	operationsPath = "../docs/operations.md"

	// readmeMaxLines bounds the README: measurements go to
	// docs/guarantees.md, operations to docs/operations.md, CI to
	// CONTRIBUTING.md.
	readmeMaxLines = 300
	// writeYourOwnBy is the line by which "Write your own service" starts.
	writeYourOwnBy = 150
	// writeYourOwnHeading is the section a reader building a service
	// looks for first.
	writeYourOwnHeading = "## Write your own service"

	// The markers around the README's snippet, and the placeholder the
	// snippet holds until examples/volume lands.
	snippetBegin       = "<!-- snippet:write-your-own:begin -->"
	snippetEnd         = "<!-- snippet:write-your-own:end -->"
	snippetPlaceholder = "// SNIPPET:"
	// snippetSource is the example the snippet comes from.
	snippetSource = "../examples/volume"
	// testSnippetBegin and testSnippetEnd mark the README's second
	// snippet, the example's test: a fragment of one of its test files.
	testSnippetBegin = "<!-- snippet:test:begin -->"
	testSnippetEnd   = "<!-- snippet:test:end -->"
	// The markers around the third snippet, the example's chaos test:
	// fragments of its model and of its test, elisions between.
	chaosSnippetBegin = "<!-- snippet:chaos:begin -->"
	chaosSnippetEnd   = "<!-- snippet:chaos:end -->"
)

// readDoc returns the lines of the document at path, relative to this
// package.
func readDoc(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err, "read %s", path)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestReadme: the README is at most readmeMaxLines long, "Write your
// own service" starts within its first writeYourOwnBy lines, its
// Quickstart keeps the demo and the test command (.ci/run runs the
// latter with -race, as "the README's test command"), it links every
// document, and its snippet is marked.
func TestReadme(t *testing.T) {
	lines := readDoc(t, readmePath)
	text := strings.Join(lines, "\n")
	assert.LessOrEqual(t, len(lines), readmeMaxLines,
		"README.md has %d lines: keep it an overview of at most %d; measurements go to docs/guarantees.md, running a cluster to docs/operations.md, CI to CONTRIBUTING.md",
		len(lines), readmeMaxLines)

	at := slices.Index(lines, writeYourOwnHeading)
	if assert.GreaterOrEqual(t, at, 0, "README.md has no line %q", writeYourOwnHeading) {
		assert.Less(t, at, writeYourOwnBy, "README.md's %q starts at line %d: bring it within the first %d lines", writeYourOwnHeading, at+1, writeYourOwnBy)
	}

	quick := section(lines, "## Quickstart")
	require.NotEmpty(t, quick, "README.md has no \"## Quickstart\" section")
	for _, cmd := range []string{"go run ./refnode", "go test ./..."} {
		assert.True(t, slices.ContainsFunc(quick, func(l string) bool { return strings.HasPrefix(l, cmd+" ") || l == cmd }),
			"README.md's Quickstart has no line starting with %q: .ci/run and the tests' docs cite it", cmd)
	}

	for _, doc := range []string{"docs/design.md", "docs/wire.md", "docs/guarantees.md", "docs/operations.md", "CONTRIBUTING.md"} {
		assert.Contains(t, text, "]("+doc, "README.md links no %s: link it from the documentation list", doc)
	}

	_, err := readmeSnippet(lines)
	assert.NoError(t, err)
}

// section returns the lines of the section under heading, up to the
// next heading of the same or a higher level, or nil.
func section(lines []string, heading string) []string {
	at := slices.Index(lines, heading)
	if at < 0 {
		return nil
	}
	level := strings.IndexFunc(heading, func(r rune) bool { return r != '#' })
	for i := at + 1; i < len(lines); i++ {
		if l := headingLevel(lines[i]); l > 0 && l <= level {
			return lines[at+1 : i]
		}
	}
	return lines[at+1:]
}

// headingLevel is the level of a Markdown heading line, 0 for any other
// line. Lines in fenced code blocks are the caller's to skip.
func headingLevel(line string) int {
	n := strings.IndexFunc(line, func(r rune) bool { return r != '#' })
	if n < 1 || n > 6 || !strings.HasPrefix(line[n:], " ") {
		return 0
	}
	return n
}

// readmeSnippet returns the Go code of the README's marked snippet: one
// ```go block, alone between the markers.
func readmeSnippet(lines []string) (string, error) {
	return markedSnippet(lines, snippetBegin, snippetEnd)
}

// markedSnippet returns the Go code of one ```go block, alone between
// the lines begin and end.
func markedSnippet(lines []string, snippetBegin, snippetEnd string) (string, error) {
	begin, end := slices.Index(lines, snippetBegin), slices.Index(lines, snippetEnd)
	if begin < 0 || end < 0 || end < begin {
		return "", fmt.Errorf("README.md: the snippet of %q is not between the lines %s and %s", writeYourOwnHeading, snippetBegin, snippetEnd)
	}
	body := lines[begin+1 : end]
	if len(body) < 2 || body[0] != "```go" || body[len(body)-1] != "```" {
		return "", fmt.Errorf("README.md line %d: put exactly one ```go block between %s and %s", begin+1, snippetBegin, snippetEnd)
	}
	return strings.Join(body[1:len(body)-1], "\n") + "\n", nil
}

// TestReadmeSnippet: the README's snippet compiles. A complete file
// (one that starts with its package clause) is built as a program of
// its own in this module; a fragment must appear, line for line, in a
// Go file of examples/volume, whose own build and tests cover it ("..."
// or "// ..." on a line of its own stands for lines left out). Until
// the example lands the snippet is a placeholder, and the test skips.
func TestReadmeSnippet(t *testing.T) {
	snippet, err := readmeSnippet(readDoc(t, readmePath))
	require.NoError(t, err)
	if strings.HasPrefix(strings.TrimSpace(snippet), snippetPlaceholder) {
		t.Skipf("README.md's snippet is still the placeholder (%s): fill it in from examples/volume", strings.TrimSpace(snippet))
	}
	if _, err := parser.ParseFile(token.NewFileSet(), "snippet.go", snippet, parser.PackageClauseOnly); err == nil {
		buildSnippet(t, snippet)
		return
	}
	findFragment(t, snippet)
}

// TestReadmeTestSnippet: the README's second snippet, the example's
// test, appears line for line in a test file of examples/volume, which
// CI runs.
func TestReadmeTestSnippet(t *testing.T) {
	snippet, err := markedSnippet(readDoc(t, readmePath), testSnippetBegin, testSnippetEnd)
	require.NoError(t, err)
	findFragment(t, snippet)
}

// TestReadmeChaosSnippet: the README's chaos snippet appears, run by
// run between its elisions, in a test file of examples/volume.
func TestReadmeChaosSnippet(t *testing.T) {
	snippet, err := markedSnippet(readDoc(t, readmePath), chaosSnippetBegin, chaosSnippetEnd)
	require.NoError(t, err)
	findFragment(t, snippet)
}

// findFragment fails t unless snippet is a fragment of a Go file of
// snippetSource.
func findFragment(t *testing.T, snippet string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(snippetSource, "*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "README.md's snippet is a fragment, but %s has no Go file to find it in", snippetSource)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if fragmentIn(snippet, string(b)) {
			t.Logf("README.md's snippet is in %s", f)
			return
		}
	}
	t.Errorf("README.md's snippet is in no Go file of %s: copy it from the example (lines compared without their indentation; a line \"// ...\" stands for lines left out), or make it a complete file\n%s", snippetSource, snippet)
}

// buildSnippet builds the complete Go file src as a package of this
// module, in a directory that go's ./... patterns ignore, removed after.
func buildSnippet(t *testing.T, src string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "find the go command to build README.md's snippet")
	dir, err := os.MkdirTemp(".", "_readme-snippet-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "snippet.go"), []byte(src), 0o644))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", os.DevNull, "./"+filepath.Base(dir)).CombinedOutput()
	require.NoError(t, err, "README.md's snippet does not build: fix it in README.md (or in examples/volume, whence it comes)\n%s", out)
}

// fragmentIn reports whether the lines of fragment appear in src in
// order, each run between elisions ("..." or "// ...") contiguous, lines
// compared without their indentation and blank lines ignored.
func fragmentIn(fragment, src string) bool {
	norm := func(s string) []string {
		var out []string
		for l := range strings.SplitSeq(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	var runs [][]string
	cur := []string{}
	for _, l := range norm(fragment) {
		if l == "..." || l == "// ..." {
			runs, cur = append(runs, cur), []string{}
			continue
		}
		cur = append(cur, l)
	}
	runs = append(runs, cur)
	have := norm(src)
	from := 0
	for _, run := range runs {
		if len(run) == 0 {
			continue
		}
		found := -1
		for i := from; i+len(run) <= len(have); i++ {
			if slices.Equal(have[i:i+len(run)], run) {
				found = i
				break
			}
		}
		if found < 0 {
			return false
		}
		from = found + len(run)
	}
	return true
}

func TestFragmentIn(t *testing.T) {
	src := "package x\n\nfunc a() {\n\tb()\n\tc()\n\td()\n}\n"
	for _, tc := range []struct {
		fragment string
		want     bool
	}{
		{"b()\nc()\n", true},
		{"func a() {\n    b()\n\n    c()\n", true},
		{"b()\n// ...\nd()\n", true},
		{"b()\nd()\n", false},
		{"c()\n...\nb()\n", false},
		{"e()\n", false},
	} {
		assert.Equal(t, tc.want, fragmentIn(tc.fragment, src), "fragment %q", tc.fragment)
	}
}

// docFiles are the documents whose links TestDocLinks checks, relative
// to this package.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{readmePath, "../CONTRIBUTING.md"}
	for _, pattern := range []string{"../docs/*.md", "../examples/*/README.md"} {
		more, err := filepath.Glob(pattern)
		require.NoError(t, err)
		files = append(files, more...)
	}
	return files
}

var (
	// linkRE is an inline Markdown link: [text](target).
	linkRE = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	// codeSpanRE is an inline code span, whose brackets are no link.
	codeSpanRE = regexp.MustCompile("`[^`]*`")
)

// docLink is a relative link of a document.
type docLink struct {
	line   int
	target string
}

// parsedDoc is what TestDocLinks reads of a document: its headings'
// anchors and its relative links, both outside fenced code blocks.
type parsedDoc struct {
	anchors map[string]bool
	links   []docLink
}

func parseDoc(lines []string) parsedDoc {
	d := parsedDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	fenced := false
	prose := make([]string, len(lines)) // fenced lines blank, code spans cut
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		prose[i] = codeSpanRE.ReplaceAllString(l, "")
		if n := headingLevel(l); n > 0 {
			slug := headingSlug(l[n+1:])
			if k := seen[slug]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		}
	}
	// A link's text may run over several lines.
	text := strings.Join(prose, "\n")
	for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
		target := text[m[2]:m[3]]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		d.links = append(d.links, docLink{line: strings.Count(text[:m[2]], "\n") + 1, target: target})
	}
	return d
}

// headingSlug is GitHub's anchor of a heading's text: lower case,
// letters, digits, '-' and '_' kept, spaces made '-', the rest dropped.
func headingSlug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestHeadingSlug(t *testing.T) {
	for text, want := range map[string]string{
		"Broker users: least privilege":                 "broker-users-least-privilege",
		"Chaos: every fault at once, histories checked": "chaos-every-fault-at-once-histories-checked",
		"2. Transport: AMQP 0-9-1 on RabbitMQ":          "2-transport-amqp-0-9-1-on-rabbitmq",
		"Why `fence.For`?":                              "why-fencefor",
	} {
		assert.Equal(t, want, headingSlug(text), "slug of %q", text)
	}
}

// TestDocLinks: every relative link of the README, CONTRIBUTING.md,
// docs/*.md and the examples' READMEs names a file or directory that
// exists, and its #anchor, if any, a heading of that document.
func TestDocLinks(t *testing.T) {
	parsed := map[string]parsedDoc{}
	parse := func(path string) parsedDoc {
		if d, ok := parsed[path]; ok {
			return d
		}
		d := parseDoc(readDoc(t, path))
		parsed[path] = d
		return d
	}
	checked := 0
	for _, file := range docFiles(t) {
		for _, l := range parse(file).links {
			checked++
			where := fmt.Sprintf("%s line %d: link %q", strings.TrimPrefix(file, "../"), l.line, l.target)
			path, anchor, _ := strings.Cut(l.target, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: no such file (%v): fix the path, relative to the document", where, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if !parse(target).anchors[anchor] {
				t.Errorf("%s: %s has no heading with the anchor #%s: name a heading there, as GitHub spells it (lower case, punctuation dropped, spaces as '-')", where, strings.TrimPrefix(target, "../"), anchor)
			}
		}
	}
	t.Logf("%d relative links in %d documents checked", checked, len(docFiles(t)))
}

// TestGuaranteesKeepTheirCommands: every section of docs/guarantees.md
// gives the command that measures its figures (a `go test` line), and
// so does each section of docs/operations.md that cites a test.
func TestGuaranteesKeepTheirCommands(t *testing.T) {
	for _, path := range []string{guaranteesPath, operationsPath} {
		lines := readDoc(t, path)
		n := 0
		for _, l := range lines {
			if headingLevel(l) != 2 {
				continue
			}
			body := strings.Join(section(lines, l), "\n")
			if path == operationsPath && !regexp.MustCompile(`\bTest[A-Z]\w*`).MatchString(body) {
				continue
			}
			n++
			assert.Contains(t, body, "go test", "%s, %q: give the command that measures its figures (a go test line) next to them", strings.TrimPrefix(path, "../"), l)
		}
		assert.Positive(t, n, "%s has no section to check", path)
	}
}
