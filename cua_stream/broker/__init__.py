"""The local Apache Kafka broker (KRaft, from Maven Central jars) that the demo and the tests run on."""

from cua_stream.broker.local import BrokerConfig, BrokerStatus, LocalBroker, ephemeral_range, java_version

__all__ = ["BrokerConfig", "BrokerStatus", "LocalBroker", "ephemeral_range", "java_version"]
