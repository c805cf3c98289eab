# The scripts' one set of locations, sourced by every bash script here and
# read by common.py (the Python scripts' helper module), so a reference venv
# or llama.cpp build somewhere else is one variable away:
#
#   FERRITE_CACHE      where the rest default to (${XDG_CACHE_HOME:-$HOME/.cache})
#   FERRITE_REFENV     the reference Python venv      (scripts/setup-refenv.sh makes it)
#   FERRITE_REFERENCE  downloads and builds of the references: llama.cpp's
#                      sdist and tree, ONNX exports, the ort-avx2 copy
#   FERRITE_LLAMACPP   llama.cpp's source tree (its gguf-py, converter); the
#                      binaries are in $FERRITE_LLAMACPP/build/bin
#                      (scripts/build-llamacpp.sh makes both)
#   FERRITE_TRANSLATION  the local (not committed) translation benchmark models
#
# Each one set in the environment wins. This is the only place the defaults
# are written.
FERRITE_CACHE=${FERRITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}}
FERRITE_REFENV=${FERRITE_REFENV:-$FERRITE_CACHE/ferrite-refenv}
FERRITE_REFERENCE=${FERRITE_REFERENCE:-$FERRITE_CACHE/ferrite-reference}
FERRITE_LLAMACPP=${FERRITE_LLAMACPP:-$FERRITE_REFERENCE/llama.cpp}
FERRITE_TRANSLATION=${FERRITE_TRANSLATION:-$FERRITE_CACHE/ferrite-translation}
FERRITE_LLAMACPP_BIN=$FERRITE_LLAMACPP/build/bin
# The llama-cpp-python sdist whose vendor/llama.cpp is the reference
# llama.cpp (the one the goldens were made with).
FERRITE_LLAMACPP_PYTHON_VERSION=0.3.36
export FERRITE_CACHE FERRITE_REFENV FERRITE_REFERENCE FERRITE_LLAMACPP FERRITE_TRANSLATION FERRITE_LLAMACPP_BIN \
    FERRITE_LLAMACPP_PYTHON_VERSION
