"""Before/after comparison of two reports: sides, matching of ops and findings, the noise test, selection."""
