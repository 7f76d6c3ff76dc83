// Preact + hooks + htm, vendored (see ../vendor/README.md): the one place that names the file.
export * from "../vendor/htm-preact-3.1.1.mjs";
