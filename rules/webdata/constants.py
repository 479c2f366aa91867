"""What the web-data rules and their steps name alike: the files of their outputs and the
attribute that names the language filter's model."""

FORMATS = {"warc": (".warc", ".warc.gz"), "html": (".html", ".htm")}  # extract_text's formats and their suffixes
MODEL = "model.bin"  # a trained fastText classifier (train_fasttext, train_quality_classifier)
REJECTED = "rejected"  # beside a cut corpus: the documents it rejected, and why
CLUSTERS = "clusters"  # beside a deduplicated corpus: every member of a cluster
LANGUAGE_MODEL = "language_model"  # filter_text's attribute, and a unit's file, of the language filter's model
MODEL_SUFFIXES = (".bin", ".ftz")  # a fastText model file, plain or quantized
