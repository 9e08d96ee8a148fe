"""A run folder as data: what people send each other ("here is my run, make it again") is read at
one edge, bounded and validated into typed records before anything acts on it, and nothing it
names runs without the user's consent.

    names.py     the names of a run folder's files (every module spells them through it)
    bounded.py   JSON read with size and nesting caps; RunFolderError (one line, exit 2)
    records.py   the typed records (RunRecord, CodeState, ...) and RunStatus, the one status set
    progress.py  Summary and Heartbeat: summary.json and heartbeat.json, typed, for every writer and reader
    folder.py    RunFolder(path): a run folder on this machine, each file a property, read and written
                 through the records; RunFolder.create makes a new one
    snapshot.py  RunSnapshot.take(path): a folder read once into a private snapshot (reproduce)
    seal.py      whether this machine wrote the record and nothing changed since (HMAC)
    archive.py   the untracked files' archive, read with the caps it was written with
    links.py     a run folder made, and no write through a symlink planted in it
    applog.py    append-only logs (metrics.jsonl, train.log, ...): whole lines, never through a link
    owner.py     one owner per run folder: the lock on RUN/.owner.lock and who holds it
    create.py    a run folder's name checked (exec, run, sweeps)
    find.py      run folders found under a path, one named by a user resolved
    liveness.py  whether anything still runs in a folder; a killed run's summary written for it
    slurm_state.py  a run's Slurm job (RUN/slurm/job.json) and its state from squeue and friends
    record_files.py  record.json being written (PENDING), read, and reproductions.json

Nothing is imported here: `envkit.track`, in a user's script, reads names.py alone."""
