"""Pure rules: no I/O, no os, no boto3/httpx/pywebpush."""
