"""Loading hooks: the named entry points of group ``compactor.hooks``, ``module:object`` paths,
the webhook.

Anything that cannot be loaded raises :class:`HookLoadError`, so the worker refuses to start
instead of running without a hook the platform relies on.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping
from importlib import metadata
from typing import Any

import pluggy

from worker.hooks.errors import HookLoadError
from worker.hooks.runner import HookRunner
from worker.hooks.settings import HookSettings
from worker.hooks.specs import EVENTS, PROJECT_NAME, HookSpecs

__all__ = [
    "ENTRY_POINT_GROUP",
    "hook_settings",
    "import_object",
    "load_hook_runner",
    "new_plugin_manager",
    "register_plugin",
]

ENTRY_POINT_GROUP = "compactor.hooks"
log = logging.getLogger("worker.hooks")


def new_plugin_manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(HookSpecs)
    return manager


def hook_settings(settings: Any = None) -> HookSettings:
    """Hook settings from ``None`` (environment), ``HookSettings``, an object with a ``hooks``
    attribute holding them (the worker settings), or a mapping of their fields."""
    if settings is None:
        return HookSettings()
    if isinstance(settings, HookSettings):
        return settings
    nested = getattr(settings, "hooks", None)
    if isinstance(nested, HookSettings):
        return nested
    if isinstance(settings, Mapping):
        return HookSettings(**settings)
    raise TypeError(f"cannot read hook settings from {type(settings).__name__}")


def load_hook_runner(settings: Any = None) -> HookRunner:
    """Load every configured hook and return the runner; log what was loaded."""
    config = hook_settings(settings)
    manager = new_plugin_manager()
    if config.entry_points:
        _load_entry_points(manager, config.entry_points)
    for path in config.plugins:
        register_plugin(manager, import_object(path), path)
    if config.webhook_url:
        from worker.hooks.webhook import WebhookPlugin

        register_plugin(manager, WebhookPlugin.from_settings(config), "webhook")
    _check(manager)
    runner = HookRunner(manager, timeout_s=config.timeout_s, max_calls=config.max_calls)
    _log_loaded(runner, manager)
    return runner


def import_object(path: str) -> Any:
    """``package.module:attr.sub`` → the object; ``package.module`` → the module."""
    module_name, _, attr = path.strip().partition(":")
    if not module_name:
        raise HookLoadError(f"hook plugin path {path!r} is not of the form module:object")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as err:
        raise HookLoadError(f"hook plugin {path!r}: cannot import {module_name}: {err}") from err
    for part in filter(None, attr.split(".")):
        try:
            target = getattr(target, part)
        except AttributeError as err:
            raise HookLoadError(f"hook plugin {path!r}: {module_name} has no {attr}") from err
    return target


def register_plugin(manager: pluggy.PluginManager, plugin: Any, name: str) -> None:
    """Register one plugin (a class is instantiated without arguments)."""
    if inspect.isclass(plugin):
        try:
            plugin = plugin()
        except Exception as err:
            raise HookLoadError(f"hook plugin {name}: cannot instantiate: {err}") from err
    if manager.is_registered(plugin):
        log.info("hook plugin %s is already loaded; skipped", name)
        return
    try:
        manager.register(plugin, name=name)
    except (pluggy.PluginValidationError, ValueError) as err:
        raise HookLoadError(f"hook plugin {name}: {err}") from err
    if not manager.get_hookcallers(plugin):
        manager.unregister(plugin)
        raise HookLoadError(
            f"hook plugin {name} defines no compactor hooks (mark them with worker.hooks.hookimpl)"
        )


def _load_entry_points(manager: pluggy.PluginManager, names: list[str]) -> None:
    """The named entry points of the group, in the order named; an installed plugin that is
    not named is never imported (its code would run in the worker, next to the API keys)."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    for name in dict.fromkeys(names):
        if name not in found:
            installed = ", ".join(sorted(found)) or "none"
            raise HookLoadError(f"hook entry point {name!r} is not installed (group "
                                f"{ENTRY_POINT_GROUP}; installed: {installed})")
        ep = found[name]
        dist = getattr(ep.dist, "name", "?")
        try:
            plugin = ep.load()
        except Exception as err:
            raise HookLoadError(
                f"hook entry point {ep.name} = {ep.value} (package {dist}) cannot be loaded: {err}"
            ) from err
        register_plugin(manager, plugin, ep.name)


def _check(manager: pluggy.PluginManager) -> None:
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as err:
        raise HookLoadError(f"unknown hook: {err} (known events: {', '.join(EVENTS)})") from err
    for event in EVENTS:
        for impl in getattr(manager.hook, event).get_hookimpls():
            if impl.wrapper or impl.hookwrapper:
                raise HookLoadError(f"hook plugin {impl.plugin_name}: wrappers are not supported "
                                    f"({event})")


def _log_loaded(runner: HookRunner, manager: pluggy.PluginManager) -> None:
    names = [name for name, _ in manager.list_name_plugin()]
    if not names:
        log.info("no hooks loaded")
        return
    for event in EVENTS:
        order = [impl.plugin_name for impl in runner.implementations(event)]
        if order:
            log.info("hooks for %s: %s", event, ", ".join(order))
    log.info("hook plugins loaded: %s (deadline %.3gs per call)", ", ".join(names),
             runner.timeout_s)
