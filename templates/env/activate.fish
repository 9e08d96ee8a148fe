@HEADER@
# Use it with `source activate.fish`; `deactivate_envkit` puts every variable back as it was
# (variables that were unset are erased again) and deactivates the venv it activated.

# Activating twice must not save envkit's own values as "the old ones": undo first.
if functions -q deactivate_envkit
    deactivate_envkit
end

@SET@
@VENV_ACTIVATE@
function deactivate_envkit --description 'undo envkit activate.fish'
@VENV_DEACTIVATE@
@RESTORE@
    set -e -g _ENVKIT_PROFILE
    functions -e deactivate_envkit
end

set -gx _ENVKIT_PROFILE @PROFILE@
