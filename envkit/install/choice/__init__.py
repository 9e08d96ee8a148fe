"""Which torch build this machine gets and which exact versions: the request and the choice as
data (model.py), the build from the machine's facts and envkit's tables (variants.py, cuda.py),
then the versions read off that build's index (resolve.py). Pure but for the index reads."""
