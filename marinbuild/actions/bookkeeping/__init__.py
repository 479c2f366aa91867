"""Bookkeeping: what a build reports and records — one result per target, the event
stream, who ran it where with what, and the certificate that answers a no-op."""
