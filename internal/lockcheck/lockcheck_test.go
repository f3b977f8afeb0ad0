package lockcheck_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"rdmafs/internal/lockcheck"
)

// TestAnalyzer runs the analyzer over testdata/src/a, whose "want"
// comments are the diagnostics it must give, and no others: each wrong
// form there must be caught, each right form must pass.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), lockcheck.Analyzer, "a")
}
