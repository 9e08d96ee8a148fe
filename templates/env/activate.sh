@HEADER@
# Use it with `source activate` (bash or zsh); `deactivate_envkit` puts every variable back
# as it was (variables that were unset are unset again) and deactivates the venv it activated.

# Activating twice must not save envkit's own values as "the old ones": undo first.
if command -v deactivate_envkit >/dev/null 2>&1; then
    deactivate_envkit
fi

@SET@
@VENV_ACTIVATE@
deactivate_envkit() {
@VENV_DEACTIVATE@
@RESTORE@
    unset _ENVKIT_PROFILE
    unset -f deactivate_envkit
}

export _ENVKIT_PROFILE=@PROFILE@
