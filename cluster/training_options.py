"""The coordinator's training options: one frozen dataclass, checked field by field with fixable errors."""

from __future__ import annotations

import dataclasses

from cluster import dynamic_table_options as tables
from cluster import recommender_options as clicks
from cluster.training_names import (IMAGE_SIZE, SYNTHETIC_EXAMPLES, SYNTHETIC_SHAPE, TFRECORD_IMAGE_KEY,
                                    TFRECORD_LABEL_KEY, VALIDATION_FRACTION)


def _option(default, help_text: str):
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingOptions:
    """What to train and how; every field can come from cluster.json's `training` or the command line."""

    model: str = _option("cnn", "cnn, mlp, resnet, mobilenet_v2, dlrm, wide_deep (click data), or "
                                "package.module:function returning a tf_keras model")
    dataset: str = _option("digits", "digits (embedded, real), synthetic, synthetic_criteo, from data_dir: "
                                     "image_folder, cifar10, mnist, tfrecord, criteo; or package.module:function "
                                     "called as function(split, input_context), returning an unbatched "
                                     "tf.data.Dataset of (features, label) (docs/your-data.md)")
    data_dir: str | None = _option(None, "directory of a file-based data set (relative: from the project directory); "
                                         "workers read it at the same path on their own hosts; with follow_data, "
                                         "also a Kafka topic, kafka://HOST:PORT[,HOST:PORT]/TOPIC "
                                         "(docs/kafka.md)")
    image_size: tuple[int, ...] = _option(IMAGE_SIZE, "[height, width] image_folder and tfrecord images are resized to")
    augment: bool = _option(False, "augment training images: rotation 40 degrees, shifts 0.2, shear 0.2, zoom 0.2, "
                                   "horizontal flips")
    skip_corrupt: bool = _option(False, "fixed data sets: skip malformed records (images that cannot be decoded, "
                                        "Criteo lines) instead of stopping with the file's name: each said in the "
                                        "reading task's log, their number in summary.json (skipped_records); "
                                        "follow mode always skips and counts them (max_bad_fraction)")
    criteo_validation: float | tuple[int, ...] | None = _option(
        None, "criteo: the held-out part, split in half for validation and test: null for the published convention "
              "(Kaggle train.txt: its last 1/7, the DLRM reference's day 7; 1 TB: day_23 or the last day found), a "
              "fraction of train.txt or of the last day, or a list of day numbers (1 TB layout)")
    validation_fraction: float = _option(VALIDATION_FRACTION, "image_folder with no validation folder: this part "
                                                              "of each class's training images (the last ones by "
                                                              "name) validates")
    tfrecord_image_key: str = _option(TFRECORD_IMAGE_KEY, "tf.train.Example feature holding the encoded image")
    tfrecord_label_key: str = _option(TFRECORD_LABEL_KEY, "tf.train.Example feature holding the integer label")
    tfrecord_num_classes: int | None = _option(None, "classes of a tfrecord data set; null reads every label once "
                                                     "to find the largest")
    tfrecord_features: dict | None = _option(None, "tfrecord: the schema of the tf.train.Example records, one "
                                                   "entry per feature: {dtype: int64, float32 or string, shape: [n] "
                                                   "or \"variable\", label: true for the label (exactly one)}; "
                                                   "null: image records (tfrecord_image_key, tfrecord_label_key)")
    numeric_features: tuple[str, ...] | None = _option(None, "tfrecord schema: the int64 or float32 features dlrm "
                                                             "and wide_deep feed to the bottom MLP (as dense; int64 "
                                                             "counts as log(1 + max(x, 0)))")
    categorical_features: tuple[str, ...] | None = _option(None, "tfrecord schema: the string or int64 features "
                                                                 "dlrm and wide_deep look up in tables (as ids, "
                                                                 "hashed; several values per example pooled by "
                                                                 "mean)")
    num_classes: int | None = _option(None, "classes of a dataset function's or TFRecord schema's labels, given to "
                                            "the model (the zoo models need it); null when unknown")
    strategy: str = _option("parameter_server", "parameter_server (chief, workers and ps), multi_worker_mirrored "
                                              "(every worker trains, worker 0 leads; no ps), mirrored (the chief "
                                              "alone, all its GPUs) or one_device (the chief alone, one device)")
    collective: str = _option("auto", "multi_worker_mirrored's all-reduce: auto, ring or nccl")
    loop: str = _option("fit", "fit (Keras model.fit) or custom (a custom training loop that backs up every "
                               "backup_every_steps steps and resumes mid-epoch; not with parameter_server)")
    backup_every_steps: int = _option(100, "custom loop: steps between backups of model, optimizer, epoch and step")
    synthetic_shape: tuple[int, ...] = _option(SYNTHETIC_SHAPE, "synthetic: the shape of each image, e.g. [28, 28, 1]")
    synthetic_examples: int = _option(SYNTHETIC_EXAMPLES, "synthetic: training examples (validation and test hold "
                                                          "512 each)")
    epochs: int = _option(6, "epochs to train in all (a resumed run finishes the same plan)")
    per_worker_batch: int = _option(32, "the batch is this times the workers; under parameter_server each step runs "
                                        "that whole batch on one worker (workers take steps in turn), under "
                                        "multi_worker_mirrored every worker runs this many per step")
    steps_per_epoch: int | None = _option(None, "steps per epoch; null derives it as train examples // global batch")
    steps_per_execution: int = _option(10, "steps each worker runs per remote call")
    optimizer: str = _option("adam", "adam, sgd or rmsprop")
    learning_rate: float = _option(1e-3, "initial learning rate of the optimizer (for dlrm and wide_deep, of the "
                                         "dense layers); multiplied by lr_decay_factor from each of lr_decay_epochs")
    lr_decay_epochs: tuple[int, ...] = _option((4, 6), "epochs (1-based) from which the rate is multiplied by "
                                                       "lr_decay_factor")
    lr_decay_factor: float = _option(0.1, "factor applied at each of lr_decay_epochs")
    loss: str = _option("sparse_categorical_crossentropy", "Keras loss name: categorical_* losses train on one-hot "
                                                           "labels, sparse_categorical_crossentropy on class "
                                                           "indices; binary_crossentropy (the default for dlrm and "
                                                           "wide_deep) on clicks")
    metrics: tuple[str, ...] = _option(("accuracy",), "Keras metric names: sparse_* metrics go with "
                                                      "sparse_categorical_crossentropy, the others with the "
                                                      "categorical losses; accuracy and acc with both; auc and "
                                                      "log_loss with binary_crossentropy (the default for dlrm and "
                                                      "wide_deep)")
    output_dir: str = _option("output", "checkpoints, TensorBoard logs, exported model and summary (chief's disk)")
    output_dir_shared: bool = _option(False, "parameter_server: output_dir is on storage every ps reaches at the same "
                                             "path (one machine, NFS, a ReadWriteMany claim): each ps then writes its "
                                             "own tables' rows of every checkpoint, checked at start; false: the "
                                             "chief writes every byte")
    min_shard_bytes: int = _option(256 * 1024, "smallest shard of a variable, in bytes; smaller variables stay "
                                               "whole (MinSizePartitioner, and dlrm's and wide_deep's "
                                               "BalancedPartitioner)")
    max_shards: int | None = _option(None, "MinSizePartitioner: most shards per variable; null means one per ps; "
                                           "dlrm and wide_deep ignore it (their tables are split evenly over every "
                                           "ps: tables/placement.py)")
    checkpoint_every_s: float = _option(600.0, "parameter_server: seconds between checkpoints within an epoch (at "
                                               "most this much work is lost to a failure); 0 saves at epoch ends only")
    stream_chunk_mb: float = _option(16.0, "parameter_server: the most of a table (its rows and their optimizer "
                                           "slots) the chief, the evaluator or an exporter holds at a time: tables "
                                           "(any weight over a quarter of this) are checkpointed, restored, "
                                           "exported and evaluated in chunks of about this many MB")
    keep_checkpoints: int = _option(3, "newest checkpoints kept (older ones go once the evaluator has read them)")
    keep_unevaluated_checkpoints: int = _option(10, "older checkpoints kept for an evaluator that has not read them "
                                                    "yet, at most this many (the newest); older ones are deleted "
                                                    "unread, and a lagging evaluator skips to the newest this many, "
                                                    "saying which it skipped: a slow evaluator never fills the disk")
    probe_timeout_s: float = _option(60.0, "seconds to wait for every ps and worker port before giving up")
    seed: int = _option(0, "random seed for model initialisation and shuffling")
    progress_every_s: float = _option(30.0, "seconds between progress lines (and TensorBoard points) within an "
                                            "epoch; a line also ends each epoch")
    follow_data: bool = _option(False, "train on files as they land in data_dir (criteo, tfrecord): each once, in "
                                       "landing order, handed to workers in pieces as they are free, then wait for "
                                       "more; no epochs, steps or held-out split; parameter_server only "
                                       "(docs/online-training.md)")
    follow_pattern: str = _option("*", "follow_data: the files under data_dir that are data, a glob relative to it "
                                       "(e.g. part-*.gz or */part-*); names beginning with . or _ never are, so "
                                       "write to .name.tmp and rename")
    topic_parser: str | None = _option(None, "a followed Kafka topic's messages in your own format: "
                                       "package.module:function, called on the chief with each message's bytes "
                                       "and returning the record to train (a Criteo line, or with dataset "
                                       "tfrecord a tf.train.Example or its bytes); None or an error skips the "
                                       "message, counted as malformed (docs/kafka.md)")
    data_poll_s: float = _option(10.0, "follow_data: seconds between looks at data_dir (a look reads the folder; "
                                       "it opens only files it does not hold yet)")
    settle_s: float = _option(30.0, "follow_data: a file is taken once its size and modification time stood still "
                                    "this long (longer than the producer's pauses) and it is complete: a newline "
                                    "at its end, a whole gzip stream, whole TFRecord records; 0: over one look")
    unfinished_after_s: float = _option(600.0, "follow_data: a file that stood still this long but is not "
                                               "complete (no newline at its end, a cut gzip stream) is taken as it "
                                               "is, and counted as unfinished")
    backlog_order: str = _option("oldest", "follow_data: which landed files are trained first when several wait: "
                                           "oldest (landing order) or newest (the newest first, for freshness "
                                           "after an outage)")
    max_bad_fraction: float = _option(0.5, "follow_data: malformed records are skipped and counted, unreadable "
                                           "files quarantined; a file with more than this fraction of malformed "
                                           "records is bad, and the run stops when more than this fraction of "
                                           "the last 20 files were bad or unreadable (1: never; 0: at the first "
                                           "malformed record)")
    stop_when_idle_s: float = _option(0.0, "follow_data: stop (checkpoint, last serving version, summary, exit 0) "
                                           "after this many seconds with no new data; 0 follows until sh kill.sh "
                                           "or SIGTERM")
    piece_mb: float = _option(16.0, "follow_data: plain files are handed out in byte ranges of about this many MB "
                                    "(gzip and TFRecord files whole), each to the next free worker; a lost "
                                    "worker's piece is trained again by another")
    serving_export_every_s: float = _option(600.0, "follow_data: seconds between serving versions (the first as soon "
                                                   "as something is trained): "
                                                   "output/serving/<version>, a SavedModel in TensorFlow Serving's "
                                                   "layout with assets.extra/trained_through.json")
    serving_delta_every_s: float = _option(0.0, "follow_data: seconds between serving deltas, the rows changed "
                                                "since the last one and the dense weights, written to "
                                                "output/serving/deltas for the newest version's apply_delta "
                                                "signature (python -m online.publish.follower); a run ends "
                                                "with one; 0 writes none")
    serving_delta_switch_mb: float = _option(16.0, "follow_data with serving deltas: a delta that would carry more "
                                                   "than half its version's bytes is replaced by a version (said "
                                                   "once), unless it is under this many MB (a version's checkpoint "
                                                   "and exporter cost more); 0: at half a version alone")
    serving_checkpoint: str = _option("beside", "follow_data: a serving version's checkpoint: beside (its own, "
                                                "written while the workers train on, so hand-out never pauses for "
                                                "a version; without deltas, the tables' rows without their "
                                                "optimizer slots) or settled (the workers drain for it, as for a "
                                                "periodic checkpoint; not with serving deltas)")
    keep_serving_versions: int = _option(5, "follow_data: newest serving versions kept")
    straggler_after_s: float = _option(20.0, "follow_data: a settled checkpoint (every one a resume reads) waits "
                                             "at most this many seconds for the running pieces, handing out none, "
                                             "then is written without those still running (not done in it: a run "
                                             "resumed from it trains them again); a piece running this long, and 4 "
                                             "times what its bytes took in earlier pieces, is given to another "
                                             "worker as well (the first to finish counts)")
    embedding_dim: int = _option(16, "dlrm, wide_deep: width of each categorical feature's embedding")
    table_rows: int | tuple[int, ...] = _option(clicks.DEFAULT_TABLE_ROWS, "dlrm, wide_deep: rows (hash buckets) "
                                                "of every table, or a list, one per categorical feature (26 for "
                                                "Criteo)")
    bottom_mlp: tuple[int, ...] = _option((64,), "dlrm: layer widths on the numeric features")
    top_mlp: tuple[int, ...] = _option((64, 32), "dlrm: layer widths after the interaction; wide_deep: the deep part")
    embedding_optimizer: str = _option("adagrad", "dlrm, wide_deep: the tables' optimizer, one that updates only "
                                                  "looked-up rows: adagrad, sgd or ftrl")
    embedding_learning_rate: float = _option(0.05, "dlrm, wide_deep: the tables' learning rate")
    embedding_kind: str = _option(tables.DEFAULT_KIND, "dlrm, wide_deep: hashed (each id takes the row of its value "
                                  "modulo table_rows: ids may share rows) or dynamic (each id a row of its own, "
                                  "admitted and expired; see docs/dynamic-embeddings.md)")
    embedding_capacity: int = _option(tables.DEFAULT_CAPACITY, "dynamic tables: rows in all, spread evenly over "
                                      "the ps")
    admit_after: int = _option(tables.DEFAULT_ADMIT_AFTER, "dynamic tables: an id gets a row of its own at this "
                               "sighting; before, and when the rows are full, it reads and trains its feature's "
                               "shared row")
    admit_window_steps: int = _option(tables.DEFAULT_ADMIT_WINDOW_STEPS, "dynamic tables with admit_after above 1: "
                                      "sightings count within windows of this many optimizer steps (each window's "
                                      "start halves the counts of earlier ones)")
    admission_halving: str = _option(tables.DEFAULT_ADMISSION_HALVING, "dynamic tables with admit_after above 1: "
                                     "by_load halves the sightings counted also whenever a quarter of the sketch's "
                                     "width of them came in (an id must come twice close together when new ids "
                                     "flood in); by_window only at each window's start (an id seen once a lookup "
                                     "is admitted however big the batch, but a window bringing more new ids than "
                                     "a quarter of the capacity admits nearly all of them)")
    expire_after_steps: int = _option(tables.DEFAULT_EXPIRE_AFTER_STEPS, "dynamic tables: a row whose id was not "
                                      "looked up for this many optimizer steps is freed for another id; 0 never")
    expire_after_s: float = _option(tables.DEFAULT_EXPIRE_AFTER_S, "dynamic tables: a row whose id was not looked "
                                    "up for this many seconds (by its ps's clock) is freed for another id; 0 never; "
                                    "instead of expire_after_steps")
    synthetic_new_ids: int = _option(tables.DEFAULT_NEW_IDS, "synthetic_criteo: ids born per period in each "
                                     "categorical feature (0: a fixed vocabulary of table_rows values each)")
    synthetic_id_lifetime: int = _option(tables.DEFAULT_ID_LIFETIME, "synthetic_criteo with new ids: periods an id "
                                         "occurs in before it dies")
    synthetic_period_examples: int = _option(tables.DEFAULT_PERIOD_EXAMPLES, "synthetic_criteo with new ids: "
                                             "training examples per period")


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(TrainingOptions))
