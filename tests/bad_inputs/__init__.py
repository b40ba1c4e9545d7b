"""The bad-input suite: every refused input exits non-zero with one ``hpml: error:`` line."""
