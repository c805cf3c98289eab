"""ferrite's exceptions. Every error the library raises is a `ferrite.Error`;
the native module picks the class by the library's error kind."""


class Error(Exception):
    """Base class of every error ferrite raises (the message is the library's)."""


class InputError(Error, ValueError):
    """The input or an option is wrong (a bad value, text that is not UTF-8,
    a prompt longer than the context): the caller can fix it."""


class ModelNotFoundError(Error, FileNotFoundError):
    """No model file or directory where one was named (a path, or a short
    name looked up in the models directory, ``FERRITE_MODELS``)."""


class ModelError(Error):
    """The model's files are unreadable, or describe something ferrite does
    not run, or are not the kind of model asked for."""


class CancelledError(Error):
    """The work was cancelled."""
