package containerdrelease

// Known is every containerd release line the sidecar knows, oldest first:
// the one place a new release line is added. Each row's comment names the
// containerd source, at the tag read, that shows each fact (paths in
// github.com/containerd/containerd; kata-deploy's layout in kata-containers
// tools/packaging/kata-deploy/binary/src at 4.0.0 and 4.1.0, the same in
// both). The real-containerd tests run the rows of the releases
// test/containerd/versions.mk names, and a test can add a row of its own
// (newline_test.go in the remediate package).
var Known = Table{
	// 1.7, at v1.7.29 (GKE ≤ 1.32):
	//   - version 2 at most: services/server/config/config.go ValidateV2
	//     refuses a greater one;
	//   - no per-file migration: LoadConfig there merges each file as it
	//     decodes it;
	//   - in place: mergeConfig there replaces each plugin's whole table
	//     with the imported file's;
	//   - CRIConfigVersion2: pkg/cri/cri.go, pkg/cri/config/config.go;
	//   - a byte order mark is read: loadConfigFile decodes with
	//     github.com/pelletier/go-toml (v1.9.5 in go.mod);
	//   - bin_dir only: pkg/cri/config/config.go CniConfig;
	//   - kata-deploy edits config.toml: runtime/manager.rs
	//     is_containerd_capable_of_drop_in wants 2.0 or newer.
	{
		Line:             "1.7",
		MaxConfigVersion: 2,
		MigratesEachFile: false,
		Strategy:         InPlace,
		CRI:              CRIConfigVersion2,
		KataDeploy:       KataDeployEditsMain,
		ReadsBOM:         true,
		CNIBinDirs:       false,
	},
	// 2.0, at v2.0.14 (GKE 1.33):
	//   - version 3 at most: version/version.go ConfigVersion, checked by
	//     cmd/containerd/server/config/config.go ValidateVersion;
	//   - no per-file migration: LoadConfig there migrates only a file of
	//     version 0 or 1, to the merged version;
	//   - drop-in: mergeConfig there merges plugin tables key by key;
	//   - CRIConfigVersion3: plugins/cri/runtime/plugin.go,
	//     plugins/cri/images/plugin.go, internal/cri/config/config.go;
	//   - no byte order mark: loadConfigFile decodes with
	//     github.com/pelletier/go-toml/v2;
	//   - bin_dir only: internal/cri/config/config.go CniConfig;
	//   - kata-deploy's drop-in: runtime/manager.rs
	//     is_containerd_capable_of_drop_in (2.0 or newer),
	//     containerd_version_is_2_2_or_newer is false.
	{
		Line:             "2.0",
		MaxConfigVersion: 3,
		MigratesEachFile: false,
		Strategy:         DropIn,
		CRI:              CRIConfigVersion3,
		KataDeploy:       KataDeployDropIn,
		ReadsBOM:         false,
		CNIBinDirs:       false,
	},
	// 2.1, at v2.1.0: as 2.0 (the same files show it), but for
	//   - bin_dirs: internal/cri/config/config.go CniConfig adds it and
	//     deprecates bin_dir.
	{
		Line:             "2.1",
		MaxConfigVersion: 3,
		MigratesEachFile: false,
		Strategy:         DropIn,
		CRI:              CRIConfigVersion3,
		KataDeploy:       KataDeployDropIn,
		ReadsBOM:         false,
		CNIBinDirs:       true,
	},
	// 2.2, at v2.2.0: as 2.1, but for
	//   - kata-deploy's conf.d mode: containerd's default configuration now
	//     imports /etc/containerd/conf.d/*.toml (cmd/containerd/command/config.go
	//     platformAgnosticDefaultConfig, defaults/defaults_unix.go
	//     DefaultConfigIncludePattern), and kata-deploy uses that directory
	//     from this release (runtime/manager.rs
	//     containerd_version_is_2_2_or_newer, config.rs get_containerd_paths).
	{
		Line:             "2.2",
		MaxConfigVersion: 3,
		MigratesEachFile: false,
		Strategy:         DropIn,
		CRI:              CRIConfigVersion3,
		KataDeploy:       KataDeployConfD,
		ReadsBOM:         false,
		CNIBinDirs:       true,
	},
	// 2.3, at v2.3.0: as 2.2, but for
	//   - version 4 at most: version/version.go ConfigVersion;
	//   - per-file migration: cmd/containerd/server/config/config.go
	//     LoadConfigWithPlugins migrates a file whose version is below the
	//     merged one, with every plugin's ConfigMigration, before merging it.
	{
		Line:             "2.3",
		MaxConfigVersion: 4,
		MigratesEachFile: true,
		Strategy:         DropIn,
		CRI:              CRIConfigVersion3,
		KataDeploy:       KataDeployConfD,
		ReadsBOM:         false,
		CNIBinDirs:       true,
	},
	// 2.4, at v2.4.2 (the newest): as 2.3 (the same files show it).
	{
		Line:             "2.4",
		MaxConfigVersion: 4,
		MigratesEachFile: true,
		Strategy:         DropIn,
		CRI:              CRIConfigVersion3,
		KataDeploy:       KataDeployConfD,
		ReadsBOM:         false,
		CNIBinDirs:       true,
	},
}
