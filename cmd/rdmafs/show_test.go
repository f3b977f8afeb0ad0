package main

import (
	"testing"

	"rdmafs/internal/show"
)

// show's arguments: a word that is not a kind after MOUNT is refused.
func TestShowPositional(t *testing.T) {
	var o show.Options
	if err := showPositional(&o, []string{"/x", "bogus"}); err == nil {
		t.Error("an unknown kind is accepted")
	}
}
