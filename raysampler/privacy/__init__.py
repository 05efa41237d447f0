"""What the sites' messages reveal, bounded: secure sums (the coordinator sees only totals over sites), the release
ledger (every message a site sends, by kind) and the differential-privacy mode with its accountant. docs/privacy.md
states what each hides and what it does not."""
