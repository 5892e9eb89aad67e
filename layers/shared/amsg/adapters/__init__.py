"""Adapters: the only modules that talk to AWS, push services or LLM endpoints."""
