"""verify: replay the failing step under the failing GPU's memory, then once per fix (on cuda or a simulated GPU)."""
