#!/usr/bin/env bash
# Runs a Kafka main class on the image's jars, with the environment variables of Kafka's
# own bin/kafka-run-class.sh: KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_JMX_OPTS,
# KAFKA_LOG4J_OPTS, KAFKA_OPTS, LOG_DIR, JAVA_HOME. Defaults are Kafka's; tools log
# warnings to stderr (config/tools-log4j2.yaml) so their stdout stays parseable.
set -euo pipefail
if [[ $# -lt 1 ]]; then
    echo "usage: $0 classname [options]" >&2
    exit 1
fi
base=/opt/kafka
heap=${KAFKA_HEAP_OPTS:--Xmx256M}
perf=${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true}
log4j=${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$base/config/tools-log4j2.yaml}
java=${JAVA_HOME:+$JAVA_HOME/bin/}java
# shellcheck disable=SC2086  # the *_OPTS variables are lists of JVM flags
exec "$java" $heap $perf ${KAFKA_JMX_OPTS:-} $log4j "-Dkafka.logs.dir=${LOG_DIR:-$base/logs}" \
    ${KAFKA_OPTS:-} -cp "$base/libs/*" "$@"
