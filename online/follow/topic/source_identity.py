"""Which Kafka cluster and topic a run's stream was read from, the topic by its id (KIP-516) as well as its name:
another cluster or topic, or the topic deleted and created again under its name (a new id, however many messages
it holds now), stops the run with one line. A stream recorded without an id (an earlier version, or a broker that
has none) takes the id the broker gives now. A topic created again while the chief reads it crashes the client
(librdkafka 2.16's metadata cache, confluentinc/librdkafka#4964): the chief the launcher starts again says this."""

from __future__ import annotations

from common.errors import Problem, UserError

NO_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # the zero id: a broker without topic ids answers with it


def topic_id(admin, topic: str) -> str | None:
    """The topic's id as the broker gives it (base64), None when the broker has none (older than Kafka 2.8: it
    cannot be asked); raises KafkaException while the broker cannot be reached (within the request's own timeout)."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection  # the client is known to be installed

    try:
        found = str(admin.describe_topics(TopicCollection([topic]), request_timeout=10)[topic].result().topic_id)
    except KafkaException as error:
        if error.args and getattr(error.args[0], "code", lambda: None)() in (KafkaError.UNSUPPORTED_VERSION,
                                                                            KafkaError._UNSUPPORTED_FEATURE):
            return None
        raise
    return None if found in ("", "None", NO_ID) else found


def checked_source(spool, address: str, cluster_id: str | None, topic: str,
                   found_id: str | None) -> UserError | None:
    """The error that stops the run when the stream's record names another source than the one reached (else
    None; a stream without a record, or without the topic's id, records it now)."""
    recorded = spool.source()
    problem = source_problem(recorded, address, cluster_id, topic, found_id) if recorded else None
    if problem is None and (not recorded or (found_id and not recorded.get("topic_id"))):
        spool.record_source({"cluster_id": cluster_id, "topic": topic, "topic_id": found_id})
    return problem


def source_problem(recorded: dict, address: str, cluster_id: str | None, topic: str,
                   found_id: str | None) -> UserError | None:
    """The error that stops the run when the stream's record (`recorded`) names another source than the one
    reached, else None."""
    if recorded.get("cluster_id") != cluster_id or recorded.get("topic") != topic:
        return UserError(Problem("training.data_dir", address, f"reaches Kafka cluster {cluster_id} topic {topic}, "
                                 f"but this run's stream was read from cluster {recorded.get('cluster_id')} topic "
                                 f"{recorded.get('topic')}", "give the topic this run follows, or another "
                                 "output_dir to start over"))
    if recorded.get("topic_id") and found_id and recorded["topic_id"] != found_id:
        return recreated_error(address, recorded["topic_id"], found_id)
    return None


def recreated_error(address: str, recorded_id: str, found_id: str) -> UserError:
    return UserError(Problem("training.data_dir", address, f"has topic id {found_id}, but this run's stream was read "
                             f"from id {recorded_id}: the topic was deleted and created again",
                             "follow the new topic in another output_dir (sh run.sh --fresh)"))
