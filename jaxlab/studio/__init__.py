"""``jaxlab studio``: a Kinetix level editor and player in the browser, on jaxlab's own engine.

- ``editor``: validated level edits (every edit goes through the level reader's checks);
- ``player``: the jitted frame step, keys to actions, the scene and frame payloads;
- ``agent``: a trained ``kinetix-ppo`` policy playing the level;
- ``server``: the Starlette app (workspaces per browser tab, the JSON API and the play WebSocket);
- ``cli``: the command; ``static/``: the page (plain HTML, JavaScript and a canvas).
"""
