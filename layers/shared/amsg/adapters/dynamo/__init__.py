"""Single-table DynamoDB adapter (spec storage.md Part D, decisions 12-13, R3, R6-R8, R10-R11)."""
