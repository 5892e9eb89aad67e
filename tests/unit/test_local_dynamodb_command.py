"""DynamoDB Local's JVM argv: the heap cap and the collector come from the environment, JVM options before the jar."""

from __future__ import annotations

from pathlib import Path

from amsg_local.dynamodb_local import DEFAULT_GC, java_command

JAR = Path("/opt/ddb/DynamoDBLocal.jar")


def _jvm_options(environ: dict[str, str]) -> list[str]:
    argv = java_command("java", JAR, 8000, ("-delayTransientStatuses",), environ)
    assert argv[0] == "java"
    assert argv[argv.index("-jar") + 1] == str(JAR)
    assert argv[-3:] == ["-port", "8000", "-delayTransientStatuses"]
    return argv[1 : argv.index("-jar")]


def test_the_throughput_collector_and_a_capped_heap_by_default() -> None:
    options = _jvm_options({})
    assert DEFAULT_GC == "-XX:+UseParallelGC"
    assert options == ["-Xmx1g", "-XX:+UseParallelGC", "-Djava.library.path=/opt/ddb/DynamoDBLocal_lib"]


def test_the_environment_picks_the_heap_and_the_collector() -> None:
    options = _jvm_options({"AMSG_DYNAMODB_LOCAL_HEAP": "512m", "AMSG_DYNAMODB_LOCAL_GC": "-XX:+UseG1GC -Xmn64m"})
    assert options[:3] == ["-Xmx512m", "-XX:+UseG1GC", "-Xmn64m"]


def test_other_jvm_options_come_after_the_collector_and_before_the_jar() -> None:
    argv = java_command("java", JAR, 8000, (), {}, ("-XX:StartFlightRecording=filename=/tmp/r.jfr",))
    assert argv[2:4] == ["-XX:+UseParallelGC", "-XX:StartFlightRecording=filename=/tmp/r.jfr"]
    assert argv.index("-jar") > 3


def test_an_empty_collector_leaves_the_choice_to_the_jvm() -> None:
    options = _jvm_options({"AMSG_DYNAMODB_LOCAL_GC": ""})
    assert not any(option.startswith("-XX:+Use") for option in options)
