"""What a site is: its profile (`profiles`: found, merged, loaded; `schema`: what a profile may
say), the rules its documentation states (`rules`: checked before anything is written) and the
ways its ranks are started (`launchers`)."""
