"""Data for the trainer: `datasets` (synthetic, text, npz, tokens, user factories -> a DataBundle),
`bundle` (the DataBundle and the resumable batch order), `tokens` (nanoGPT-style .bin folders),
`prefetch` (the next batch fetched and copied one ahead). A dataset path arrives absolute
(plan/resolve.py made it so before the run started): the builders open it as given."""
