"""Proving the target equals the source, and fixing exactly what does not: compare (fingerprints
of key ranges on both sides, narrowed to the rows), findings (what a verify found, in the run
history), repair (re-reads exactly those ranges, or a range a person gives)."""
