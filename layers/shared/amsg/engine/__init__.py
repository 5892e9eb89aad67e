"""The delivery engine: tick (claim + enqueue), run_task (adopt claim + deliver), runTask, instant delivery.

Pure orchestration over ports; no boto3, httpx or pywebpush imports here.
"""
