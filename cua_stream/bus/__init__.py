"""The bus: events to and from Kafka. Producer, consumer, transactional loop, admin, in-memory fakes."""
