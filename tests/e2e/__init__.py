"""End-to-end runs on the real bundled model (marked e2e; `make test-fast` leaves them out)."""
