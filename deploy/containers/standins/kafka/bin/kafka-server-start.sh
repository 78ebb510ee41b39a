#!/usr/bin/env bash
# The broker (and/or controller) with the given server.properties; Kafka's defaults for a
# server: a 1 GiB heap and logging to stdout (config/log4j2.yaml).
set -euo pipefail
if [[ $# -lt 1 ]]; then
    echo "usage: $0 server.properties [--override property=value]..." >&2
    exit 1
fi
export KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G}
export KAFKA_LOG4J_OPTS=${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml}
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
