"""train.yaml as data, read without torch (`envkit validate`, the launcher's parent and the planner
all read it here). Read in this order: `schema` (one frozen dataclass per section, each key's Field),
`coerce` (the YAML file and `--set` text, each value checked against its Field), `config`
(defaults < profile < YAML < --set -> a frozen Config, each value's origin beside it, and the rules
across keys). Beside them: `paths` (where a dataset path points), `token_files` and `cifar_files`
(a dataset folder checked by its sizes, before any run starts), `batch_auto` (training.batch_size: auto,
asked for, and a resumed run's number kept), `schema_doc` (the train.yaml
reference, docs/reference/train-yaml.md). Below plan/ and train/: it imports only the shared helpers."""
