"""HTTP plumbing shared by every route: request model, body reading, gates, envelopes, responses."""
